"""``depends_on``: fields decided after their parents, with the parents' values given in the prompt.

Wave 0 is every field without parents. The first batched pass scores the whole plan on the usual prompt
(so wave-0 fields get exactly the scores of a decision without dependencies). Wave k holds the fields
whose parents are all in earlier waves; they are re-scored in one more batched pass over a plan of those
fields alone, whose prompt adds a "Given:" line with the parents' decided values (:func:`given_text`, sub-plans from
:meth:`DecisionSchema.subset`). Their first-pass scores are discarded and their record says
``score_source="dependency"`` and ``given`` (the parents' values).

Constraints and waves: before wave k+1 is conditioned on wave k, wave k is decided over the *whole* plan
with the constraints (later waves' first-pass scores standing in for theirs), and its constrained fields are
then pinned (:func:`typedlm.decide.result.pins`): every later solve keeps them. So a parent never changes
after a child was scored "given" it, and the pins come from one feasible assignment, so the later solves stay
feasible. Cycles and unknown parents are refused when the schema is built.
"""

from __future__ import annotations

from typing import Any

from ...errors import SchemaError
from ...grammar.spec import canonical_json


def waves(schema) -> list[tuple[str, ...]]:
    """Topological waves of field names (schema order inside a wave); raises SchemaError on bad parents."""
    names = set(schema.names)
    deps = {f.name: set(f.depends_on) for f in schema.fields}
    for f in schema.fields:
        for p in f.depends_on:
            if p == f.name:
                raise SchemaError(f"field '{f.name}': depends on itself")
            if p not in names:
                raise SchemaError(f"field '{f.name}': depends_on names unknown field {p!r}")
    out: list[tuple[str, ...]] = []
    done: set[str] = set()
    while len(done) < len(names):
        wave = tuple(n for n in schema.names if n not in done and deps[n] <= done)
        if not wave:
            cyc = _cycle({n: deps[n] for n in schema.names if n not in done})
            raise SchemaError("depends_on has a cycle: " + " -> ".join(cyc))
        out.append(wave)
        done |= set(wave)
    return out


def _cycle(deps: dict[str, set[str]]) -> list[str]:
    path: list[str] = []
    node = next(iter(deps))
    while node not in path:
        path.append(node)
        node = sorted(deps[node] & set(deps))[0]
    return path[path.index(node):] + [node]


def given_text(schema, values: dict[str, Any], fields: tuple[str, ...]) -> str:
    """The "Given:" line for a wave: every parent of ``fields`` with its decided value (JSON)."""
    parents: list[str] = []
    for n in fields:
        for p in schema[n].depends_on:
            if p not in parents:
                parents.append(p)
    parts = [f'"{p}": {canonical_json(values[p])}' for p in parents]
    return "Given: " + "; ".join(parts) + "."

