"""Repeated subschemas of llguidance's schema said once: the core form inlines (the normalizer distributes
``allOf``/``oneOf`` and copies ``$ref`` targets into each use), so a 17 KB schema can reach 350 KB and
llguidance builds every copy (MaskBench ``Github_hard---o69207``: 730 ms; shared: 77 ms). Each schema object
that occurs twice or more, and is not tiny, becomes one ``$defs`` entry that its places ``$ref``. A
``$ref`` alone means what its target means, so the language is the same."""

from __future__ import annotations

import json

MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")  # name -> schema
LISTS = ("anyOf", "allOf", "oneOf", "prefixItems", "items")  # [schema] ("items": a list in old drafts)
ONE = ("items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains",
       "propertyNames", "unevaluatedProperties", "unevaluatedItems")  # schema
MIN_NODES = 6  # smaller objects are cheaper inline than a rule of their own
PREFIX = "typedlm_shared_"


def share_repeats(root: dict) -> dict:
    """``root`` (a schema object) with each repeated schema object below it moved to ``$defs``."""
    table: dict[tuple, int] = {}  # a node's signature -> its id (equal objects get equal ids)
    counts: dict[int, int] = {}
    sizes: dict[int, int] = {}

    ids: dict[int, int] = {}  # id(object) -> node id (each object signed once)

    def node_id(x) -> int:
        if not isinstance(x, dict):
            sig: tuple = ("v", json.dumps(x, sort_keys=True))
            return table.setdefault(sig, len(table))
        if id(x) in ids:
            return ids[id(x)]
        parts, size = [], 1
        for k in sorted(x):
            v = x[k]
            if kind(k, v) is None:
                parts.append((k, json.dumps(v, sort_keys=True)))
            elif kind(k, v) == "map":
                kids = tuple((name, node_id(s)) for name, s in v.items())  # order kept: it is the key order
                parts.append((k, "m", kids))
                size += sum(sizes.get(i, 1) for _, i in kids)
            elif kind(k, v) == "list":
                kids = tuple(node_id(s) for s in v)
                parts.append((k, "l", kids))
                size += sum(sizes.get(i, 1) for i in kids)
            else:
                i = node_id(v)
                parts.append((k, "s", i))
                size += sizes.get(i, 1)
        i = ids[id(x)] = table.setdefault(("o", tuple(parts)), len(table))
        sizes[i] = size
        return i

    def index(x) -> None:  # every place a schema object occurs, counted
        if isinstance(x, dict):
            i = node_id(x)
            counts[i] = counts.get(i, 0) + 1
            for k, v in x.items():
                how = kind(k, v)
                for s in (v.values() if how == "map" else v if how == "list" else [v] if how == "one" else []):
                    index(s)

    index(root)
    shared = {i for i, c in counts.items() if c >= 2 and sizes[i] >= MIN_NODES and i != ids[id(root)]}
    if not shared:
        return root
    defs: dict[str, object] = {}

    def rebuild(x: dict) -> dict:
        out = {}
        for k, v in x.items():
            how = kind(k, v)
            out[k] = ({name: place(s) for name, s in v.items()} if how == "map" else [place(s) for s in v]
                      if how == "list" else place(v) if how == "one" else v)
        return out

    def place(x):
        if not isinstance(x, dict):
            return x
        i = ids.get(id(x))
        if i in shared:
            name = f"{PREFIX}{i}"
            if name not in defs:
                defs[name] = None  # claimed before its body is built
                defs[name] = rebuild(x)
            return {"$ref": f"#/$defs/{name}"}
        return rebuild(x)

    out = rebuild(root)
    return {**out, "$defs": {**out.get("$defs", {}), **defs}}


def kind(key: str, value) -> str | None:
    """How a keyword holds schemas: "map" (name -> schema), "list", "one", or None (a plain value)."""
    if key in MAPS and isinstance(value, dict):
        return "map"
    if key in LISTS and isinstance(value, list):
        return "list"
    if key in ONE and isinstance(value, dict):
        return "one"
    return None
