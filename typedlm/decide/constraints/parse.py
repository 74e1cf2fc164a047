"""Hard constraints on a decision: parsing them from a schema spec and checking that they can hold.

Per multi field: ``min_selected``, ``max_selected`` (``exactly`` sets both), ``exclusive`` (groups of
options of which at most one is selected) and ``requires`` (option -> options that must be selected
with it). Across fields: :class:`~typedlm.decide.constraints.terms.Implies` (if A is x then B is in S) and
:class:`~typedlm.decide.constraints.terms.Excludes` (not all of these at once). An *atom* ``(field, values)`` holds
when a scalar field's value is one of ``values``, or when a multi field selects at least one of ``values``.

Everything is checked when the schema is built (:func:`check`): unknown fields / values, bounds that
contradict each other, and a set that no assignment satisfies (the minimal conflicting constraints are
named), so a bad request fails before any model work. The joint assignment itself is
:mod:`typedlm.decide.constraints.solve`'s.
"""

from __future__ import annotations

from typing import Any

from ...errors import SchemaError
from .solve import Infeasible, MultiVar, ScalarVar, solve
from .terms import Atom, Excludes, Implies

FIELD_CONSTRAINT_KEYS = ("min_selected", "max_selected", "exactly", "exclusive", "requires")


# -- parsing (called by schema.py while it builds a Field / DecisionSchema) -------------------------
def _err(msg: str) -> SchemaError:
    return SchemaError(msg)


def _int(where: str, key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _err(f"{where}: '{key}' must be a non-negative integer, got {v!r}")
    return v


def parse_field_constraints(where: str, ftype: str, fs: dict, values: tuple[str, ...]) -> dict:
    """min/max/exclusive/requires of one field spec -> normalized Field kwargs (errors name the field)."""
    present = [k for k in FIELD_CONSTRAINT_KEYS if k in fs]
    if present and ftype != "multi":
        raise _err(f"{where}: {', '.join(map(repr, present))} apply to multi fields only")
    n = len(values)
    lo = _int(where, "min_selected", fs["min_selected"]) if "min_selected" in fs else 0
    hi = _int(where, "max_selected", fs["max_selected"]) if "max_selected" in fs else n
    if "exactly" in fs:
        k = _int(where, "exactly", fs["exactly"])
        for key, v, ok in (("min_selected", lo, lo == k), ("max_selected", hi, hi == k)):
            if key in fs and not ok:
                raise _err(f"{where}: 'exactly' {k} contradicts '{key}' {v}")
        lo = hi = k
    if lo > hi:
        raise _err(f"{where}: 'min_selected' {lo} > 'max_selected' {hi}")
    if lo > n or ("max_selected" in fs and hi > n) or ("exactly" in fs and hi > n):
        raise _err(f"{where}: asks for {max(lo, hi if 'max_selected' in fs or 'exactly' in fs else lo)} "
                   f"selected options but the field has {n}")

    def option(v: Any, what: str) -> str:
        if not isinstance(v, str) or v not in values:
            raise _err(f"{where}: {what} names unknown option {v!r}; options: {list(values)}")
        return v

    groups = []
    raw = fs.get("exclusive", [])
    if not isinstance(raw, list) or not all(isinstance(g, list) for g in raw):
        raise _err(f"{where}: 'exclusive' must be a list of option lists, e.g. [[\"a\", \"b\"]]")
    for g in raw:
        opts = tuple(option(v, "'exclusive'") for v in g)
        if len(set(opts)) < 2 or len(set(opts)) != len(opts):
            raise _err(f"{where}: an 'exclusive' group needs at least 2 distinct options, got {g!r}")
        groups.append(opts)
    reqs = []
    raw = fs.get("requires", {})
    if not isinstance(raw, dict):
        raise _err(f"{where}: 'requires' must map an option to the options it needs, e.g. {{\"a\": [\"b\"]}}")
    for a, needs in raw.items():
        a = option(a, "'requires'")
        needs = [needs] if isinstance(needs, str) else needs
        if not isinstance(needs, list) or not needs:
            raise _err(f"{where}: 'requires' of {a!r} must be a non-empty list of options")
        need = tuple(option(b, f"'requires' of {a!r}") for b in needs)
        if a in need:
            raise _err(f"{where}: option {a!r} requires itself")
        reqs.append((a, need))
    return {"min_selected": lo, "max_selected": hi, "exclusive": tuple(groups), "requires": tuple(reqs)}


def parse_cross(raw: Any, fields: dict) -> tuple:
    """The top-level ``constraints`` list -> (Implies | Excludes, ...) checked against the fields."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _err("schema 'constraints' must be a list of {\"if\": ..., \"then\": ...} / {\"excludes\": ...}")
    out = []
    for i, c in enumerate(raw):
        where = f"constraint {i}"
        if isinstance(c, (Implies, Excludes)):
            c = c.to_dict()
        if not isinstance(c, dict):
            raise _err(f"{where}: must be an object, got {type(c).__name__}")
        if set(c) == {"if", "then"}:
            when = _atoms(where + " 'if'", c["if"], fields)
            then = _atoms(where + " 'then'", c["then"], fields)
            if len(when) != 1 or len(then) != 1:
                raise _err(f"{where}: 'if' and 'then' each name exactly one field")
            out.append(Implies(when[0], then[0]))
        elif set(c) == {"excludes"}:
            atoms = _atoms(where + " 'excludes'", c["excludes"], fields)
            if len(atoms) < 2:
                raise _err(f"{where}: 'excludes' names at least two fields")
            out.append(Excludes(tuple(atoms)))
        else:
            raise _err(f"{where}: use {{\"if\": {{field: value}}, \"then\": {{field: [values]}}}} or "
                       f"{{\"excludes\": {{field: value, ...}}}}; got keys {sorted(c)}")
    return tuple(out)


def _atoms(where: str, raw: Any, fields: dict) -> list[Atom]:
    if not isinstance(raw, dict) or not raw:
        raise _err(f"{where}: must be a non-empty object field -> value (or list of values)")
    out = []
    for name, vals in raw.items():
        f = fields.get(name)
        if f is None:
            raise _err(f"{where}: unknown field {name!r}; fields: {list(fields)}")
        vals = vals if isinstance(vals, list) else [vals]
        if not vals:
            raise _err(f"{where}: field {name!r} has an empty value list")
        keys = []
        for v in vals:
            if f.type == "boolean":
                if not isinstance(v, bool):
                    raise _err(f"{where}: boolean field {name!r} takes true or false, got {v!r}")
                keys.append("true" if v else "false")
            else:
                if not isinstance(v, str) or v not in f.values:
                    raise _err(f"{where}: field {name!r} has no choice {v!r}; choices: {list(f.values)}")
                keys.append(v)
        if len(set(keys)) != len(keys):
            raise _err(f"{where}: field {name!r} repeats a value")
        out.append(Atom(name, tuple(keys)))
    return out


def field_units(schema) -> list[tuple[str, tuple[str, ...], Any]]:
    """Every declared constraint as a (label, fields it touches, item) unit, for naming conflicts."""
    units = []
    for f in schema.fields:
        if f.type != "multi":
            continue
        n = len(f.choices)
        if f.min_selected > 0:
            units.append((f"field '{f.name}' min_selected {f.min_selected}", (f.name,), ("lo", f.name)))
        if f.max_selected < n:
            units.append((f"field '{f.name}' max_selected {f.max_selected}", (f.name,), ("hi", f.name)))
        for g in f.exclusive:
            units.append((f"field '{f.name}' exclusive {list(g)}", (f.name,), ("ex", f.name, g)))
        for a, need in f.requires:
            units.append((f"field '{f.name}' requires {a!r} -> {list(need)}", (f.name,), ("rq", f.name, (a, need))))
    for c in schema.constraints:
        units.append((c.describe(), tuple(a.field for a in (c.atoms)), ("x", c)))
    return units


def constrained_fields(schema) -> set[str]:
    return {name for _label, names, _u in field_units(schema) for name in names}


def check(schema) -> None:
    """Raise SchemaError when no assignment satisfies the constraints, naming a minimal conflicting set."""
    units = field_units(schema)
    if not units:
        return
    if _feasible(schema, units):
        return
    core = list(units)
    for u in list(core):  # deletion filter: drop every unit whose removal keeps the set infeasible
        trial = [x for x in core if x is not u]
        if not _feasible(schema, trial):
            core = trial
    raise _err("constraints cannot all hold (no answer satisfies them): " + "; ".join(label for label, _, _ in core))


def _feasible(schema, units) -> bool:
    names = sorted({n for _l, ns, _u in units for n in ns})
    scalars, multis = [], []
    lo: dict = {}
    hi: dict = {}
    ex: dict = {}
    rq: dict = {}
    cross = []
    for _label, _ns, u in units:
        if u[0] == "lo":
            lo[u[1]] = schema[u[1]].min_selected
        elif u[0] == "hi":
            hi[u[1]] = schema[u[1]].max_selected
        elif u[0] == "ex":
            ex.setdefault(u[1], []).append(u[2])
        elif u[0] == "rq":
            rq.setdefault(u[1], []).append(u[2])
        else:
            cross.append(u[1])
    for name in names:
        f = schema[name]
        if f.type == "multi":
            n = len(f.choices)
            multis.append(MultiVar(name, list(f.values), [0.0] * n, [0.0] * n, None, lo.get(name, 0),
                                   hi.get(name, n), tuple(ex.get(name, ())), tuple(rq.get(name, ()))))
        else:
            vals = ["true", "false"] if f.type == "boolean" else list(f.values)
            scalars.append(ScalarVar(name, vals, [0.0] * len(vals)))
    try:
        solve(scalars, multis, cross)
    except Infeasible:
        return False
    return True

