"""Pruning a union of branches: a branch another branch of the same union already covers is dropped.

``A ∨ B`` is ``A`` when every instance of ``B`` is one of ``A``; :func:`covers` proves that only in
shapes where it is plain from the fields (it answers False when unsure), so pruning never changes what
the union accepts. Complements and ``oneOf`` multiply branches out (``¬(p ∧ q) = ¬p ∨ ¬q``); most of
the products are narrower copies of a sibling, and pruning keeps the lists small enough to emit.

Text matters too, not only values: the grammar writes an object's keys in its branch's order, so an
object branch covers another only when the other's present keys are its own, in the same order.
"""

from __future__ import annotations

from dataclasses import fields

from .branches import Array, Enum, Number, Object, Ref, Scalar, String, is_any, is_plain

OBJECT_BOOKKEEPING = ("evaluated_names", "evaluated_patterns", "evaluated_all", "partial")
ARRAY_BOOKKEEPING = ("evaluated", "contained", "partial")


def prune(branches: list) -> list:
    """``branches`` without those another one covers (twins are said once); order kept."""
    out: list = []
    for b in branches:
        if any(covers(a, b) for a in out):
            continue
        out = [a for a in out if not covers(b, a)]
        out.append(b)
    return out


def covers(a, b) -> bool:
    """Whether every text branch ``b`` lets the grammar write is one ``a`` lets it write (False: unsure)."""
    if identical(a, b):
        return True
    if isinstance(a, Enum) or isinstance(b, Enum):
        return isinstance(a, Enum) and isinstance(b, Enum) and all(
            any(identical(v, w) for w in a.values) for v in b.values)
    if isinstance(a, Scalar) or type(a) is not type(b):
        return False
    if isinstance(a, Number):
        return is_plain(a) and (b.integer or not a.integer)
    if isinstance(a, String):
        return is_plain(a)
    if isinstance(a, Array):
        return is_plain(a) and all(identical(getattr(a, f), getattr(b, f)) for f in ARRAY_BOOKKEEPING)
    return isinstance(a, Object) and _covers_object(a, b)


def _covers_object(a: Object, b: Object) -> bool:
    if any(not identical(getattr(a, f), getattr(b, f)) for f in OBJECT_BOOKKEEPING + ("patterns", "additional", "names")):
        return False
    if not set(a.required) <= set(b.required):
        return False
    if a.min_props is not None and (b.min_props is None or b.min_props < a.min_props):
        return False
    if a.max_props is not None and (b.max_props is None or b.max_props > a.max_props):
        return False
    if not set(a.properties) <= set(b.properties):  # a key only a lists: b may write it elsewhere (additional)
        return False
    present = [name for name, d in b.properties.items() if d != []]
    shared = [name for name in present if name in a.properties]
    if present[:len(shared)] != shared or [n for n in a.properties if n in present] != shared:
        return False  # b's keys that a lists come first in a's order; a writes other keys after its own
    if len(shared) < len(present) and (a.additional is not None or a.patterns or a.names is not None):
        return False
    return all(is_any(d) or identical(d, b.properties[name]) for name, d in a.properties.items())


def identical(x, y) -> bool:
    """Equal as the grammar writes them: ``1``, ``1.0`` and ``true`` differ (``==`` says they are equal),
    and so does key order; the pointer ``at`` (for refusals only) is ignored."""
    if x is y:
        return True
    if type(x) is not type(y):
        return False
    names = _COMPARED.get(type(x))
    if names is not None:
        return all(identical(getattr(x, name), getattr(y, name)) for name in names)
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(map(identical, x, y))
    if isinstance(x, dict):
        return list(x) == list(y) and all(identical(x[k], y[k]) for k in x)
    return x == y


# the fields :func:`identical` compares, per branch class
_COMPARED = {cls: tuple(f.name for f in fields(cls) if f.name != "at")
             for cls in (Array, Enum, Number, Object, Ref, Scalar, String)}
