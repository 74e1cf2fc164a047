"""``$dynamicRef`` / ``$recursiveRef`` resolved statically where the target does not depend on the
dynamic scope: plain functions; ``n`` is the running normalizer (its resolver, root and registry).
"""

from __future__ import annotations

import referencing.exceptions

from .refusal import Refuse


def dynamic_target(n, kw: str, ref, p: str):
    """``$dynamicRef`` (2020-12) / ``$recursiveRef`` (2019-09) resolved statically where that is
    exact: the initial target has no dynamic anchor (a plain ``$ref``); or the root resource (with
    an id), the outermost of every dynamic scope, defines the anchor (it wins); or only one resource in the
    schema and the registry defines it (the initial target, whatever the scope). Else refused."""
    resolved = n.builder.lookup(ref, p, kw)
    node = resolved.contents
    if kw == "$dynamicRef":
        name = ref.rpartition("#")[2] if "#" in ref else None
        anchored = bool(name) and "/" not in name and isinstance(node, dict) and node.get("$dynamicAnchor") == name
        hit = (lambda x: x.get("$dynamicAnchor") == name)
        at_root = "#" + (name or "")
    else:
        anchored = isinstance(node, dict) and node.get("$recursiveAnchor") is True
        hit = (lambda x: x.get("$recursiveAnchor") is True)
        at_root = "#"
    if not anchored:
        return resolved
    try:
        root = n.root_res.lookup(at_root)
    except referencing.exceptions.Unresolvable:
        root = None
    # jsonschema leaves a root without an id out of the dynamic scope, so the root rule
    # needs one (else the count below decides)
    if root is not None and isinstance(root.contents, dict) and hit(root.contents) \
            and n.draft.spec.id_of(n.root) and owner(n.root, root.contents, n.draft):
        return root
    docs = [n.root] + [n.registry[u].contents for u in n.registry if n.registry[u].contents
                          is not n.root]
    if sum(count_nodes(doc, hit) for doc in docs) == 1:
        return resolved
    raise Refuse(kw, p, "the target depends on the dynamic scope (several resources define the anchor)")


def count_nodes(doc, hit) -> int:
    """How many schema objects in ``doc`` (any depth) satisfy ``hit``."""
    if isinstance(doc, dict):
        return int(hit(doc)) + sum(count_nodes(v, hit) for v in doc.values())
    if isinstance(doc, list):
        return sum(count_nodes(v, hit) for v in doc)
    return 0


def owner(root, node, draft) -> bool:
    """Whether ``node`` belongs to the root resource (no subresource with its own id on the way)."""
    def walk(x, inside_root):
        if x is node:
            return inside_root
        if isinstance(x, dict):
            here = inside_root and (x is root or draft.spec.id_of(x) is None)
            return any(walk(v, here) for v in x.values())
        if isinstance(x, list):
            return any(walk(v, inside_root) for v in x)
        return False

    return walk(root, True)
