"""The texts that stand for a JSON instance under a schema's grammar: compact separators, non-ASCII kept,
object keys in schema order. The suite bench and the grammar tests ask a compiled grammar about these texts."""

from __future__ import annotations

import json
import math
from typing import Any


def _schema_key_order(schema: Any) -> list[str]:
    """Object keys in the order of their first appearance in the schema: names in any ``properties``
    and keys of objects inside ``enum``/``const`` values (which the grammar emits verbatim)."""
    seen: dict[str, None] = {}

    def values(v):
        if isinstance(v, dict):
            for k, x in v.items():
                seen.setdefault(k, None)
                values(x)
        elif isinstance(v, list):
            for x in v:
                values(x)

    def walk(s):
        if isinstance(s, dict):
            for k, v in s.items():
                if k in ("enum", "const"):
                    values(v)
                    continue
                if k in ("default", "examples"):
                    continue
                if k == "properties" and isinstance(v, dict):
                    for name in v:
                        seen.setdefault(name, None)
                walk(v)
        elif isinstance(s, list):
            for x in s:
                walk(x)

    walk(schema)
    return list(seen)


def _render(value: Any, order: dict[str, int] | None, int_floats: bool) -> str:
    if isinstance(value, dict):
        keys = list(value)
        if order is not None:
            keys.sort(key=lambda k: (order.get(k, len(order)), ))  # stable: the rest keep instance order
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _render(value[k], order, int_floats)
                              for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_render(v, order, int_floats) for v in value) + "]"
    if int_floats and isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return json.dumps(value, ensure_ascii=False)


def renderings(instance: Any, schema: Any, int_floats: bool = True) -> list[str]:
    """The texts that stand for ``instance`` under ``schema``'s grammar (canonical one first).

    Rule: compact separators (``,`` and ``:``), non-ASCII characters kept (not ``\\u`` escaped),
    object keys in *schema order* (first appearance of the name in any ``properties`` of the schema
    that is compiled, i.e. the core form from ``prepare_schema``, or as a key inside an ``enum`` /
    ``const`` value, in document order) followed by the remaining keys in instance order. Alternatives (an instance is
    accepted when any of them is): keys in instance order, and floats with an integral value written
    as integers (``1.0`` -> ``1``: the same JSON Schema value; not in draft 4, where ``1.0`` is
    no integer: ``int_floats=False``).
    """
    order = {k: i for i, k in enumerate(_schema_key_order(schema))}
    out: list[str] = []
    for o in (order, None):
        for as_int in (False, True) if int_floats else (False,):
            text = _render(instance, o, as_int)
            if text not in out:
                out.append(text)
    return out
