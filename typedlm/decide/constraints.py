"""Hard constraints on a decision and the exact solver that enforces them.

Per multi field: ``min_selected``, ``max_selected`` (``exactly`` sets both), ``exclusive`` (groups of
options of which at most one is selected) and ``requires`` (option -> options that must be selected
with it). Across fields: :class:`Implies` (if A is x then B is in S) and :class:`Excludes` (not all of
these at once). An *atom* ``(field, values)`` holds when a scalar field's value is one of ``values``,
or when a multi field selects at least one of ``values``.

Everything is checked when the schema is built (:func:`check`): unknown fields / values, bounds that
contradict each other, and a set that no assignment satisfies (the minimal conflicting constraints are
named), so a bad request fails before any model work.

The result is **exact**: :func:`solve` returns the maximum-score joint assignment of the constrained
fields that satisfies every constraint, by depth-first branch and bound with an admissible bound
(never a greedy repair). The score of an assignment is the sum of the fields' log-probabilities:
a scalar field's log p(value); a multi field's sum of log P(yes) / log P(no) per option plus the count
question's log p(|selection|) (the count row as evidence). Scalar variables branch first (values best
first); a multi field's options branch in order of decreasing gain log P(yes) - log P(no), so the
unassigned options are always a suffix of that order and the bound for the field — the best count
``k`` within its bounds, choosing the ``k`` best remaining gains — is exact for the field alone and
computed in O(remaining). Cross-field constraints are evaluated on partial assignments in three-valued
logic and prune as soon as they are decided false. Variables pinned by ``fixed`` (constrained fields a
dependency wave already decided) branch only on their value; the bounds relax the pin, so stay admissible.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import SchemaError, TypedLMError

MAX_NODES = 200_000  # search nodes per solve; past it the problem is refused, never answered greedily
FIELD_CONSTRAINT_KEYS = ("min_selected", "max_selected", "exactly", "exclusive", "requires")


class ConstraintSolveError(TypedLMError):
    """The constraint problem is too large to solve exactly within MAX_NODES search nodes."""


# -- the constraint vocabulary ---------------------------------------------------------------------
@dataclass(frozen=True)
class Atom:
    field: str
    values: tuple[str, ...]  # booleans: "true" / "false"

    def describe(self) -> str:
        vs = self.values[0] if len(self.values) == 1 else list(self.values)
        return f"{self.field} in {vs}" if len(self.values) > 1 else f"{self.field} = {vs}"


@dataclass(frozen=True)
class Implies:
    when: Atom
    then: Atom

    def to_dict(self) -> dict:
        return {"if": _atom_dict(self.when), "then": _atom_dict(self.then)}

    def describe(self) -> str:
        return f"if {self.when.describe()} then {self.then.describe()}"

    @property
    def atoms(self) -> tuple[Atom, ...]:
        return (self.when, self.then)


@dataclass(frozen=True)
class Excludes:
    atoms: tuple[Atom, ...]  # not all of them at once

    def to_dict(self) -> dict:
        out: dict = {}
        for a in self.atoms:
            out.update(_atom_dict(a))
        return {"excludes": out}

    def describe(self) -> str:
        return "not (" + " and ".join(a.describe() for a in self.atoms) + ")"


def _atom_dict(a: Atom) -> dict:
    vals = [_json_value(v) for v in a.values]
    return {a.field: vals[0] if len(vals) == 1 else vals}


def _json_value(v: str) -> Any:
    return {"true": True, "false": False}.get(v, v) if v in ("true", "false") else v


# -- Pydantic markers (``Annotated[list[Tag], MaxSelected(2)]``) -------------------------------------
@dataclass(frozen=True)
class MinSelected:
    n: int

    def spec(self) -> dict:
        return {"min_selected": self.n}


@dataclass(frozen=True)
class MaxSelected:
    n: int

    def spec(self) -> dict:
        return {"max_selected": self.n}


@dataclass(frozen=True)
class Exactly:
    n: int

    def spec(self) -> dict:
        return {"exactly": self.n}


class Exclusive:
    """At most one of these options is selected."""

    def __init__(self, *options: Any):
        self.options = [getattr(o, "value", o) for o in options]

    def spec(self) -> dict:
        return {"exclusive": [self.options]}


class Requires:
    """Selecting ``option`` requires selecting every one of ``needs``."""

    def __init__(self, option: Any, *needs: Any):
        self.option = getattr(option, "value", option)
        self.needs = [getattr(o, "value", o) for o in needs]

    def spec(self) -> dict:
        return {"requires": {self.option: self.needs}}


class DependsOn:
    """Decide this field after ``parents``, with their values given in the prompt."""

    def __init__(self, *parents: str):
        self.parents = list(parents)

    def spec(self) -> dict:
        return {"depends_on": self.parents}


MARKERS = (MinSelected, MaxSelected, Exactly, Exclusive, Requires, DependsOn)


def merge_specs(specs: Iterable[dict]) -> dict:
    """Field-spec keys from several markers (``exclusive`` lists and ``requires`` maps accumulate)."""
    out: dict = {}
    for s in specs:
        for k, v in s.items():
            if k == "exclusive":
                out.setdefault(k, []).extend(v)
            elif k == "requires":
                out.setdefault(k, {}).update(v)
            elif k == "depends_on":
                out.setdefault(k, []).extend(v)
            else:
                out[k] = v
    return out


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


# -- the problem the solver sees ---------------------------------------------------------------------
@dataclass
class ScalarVar:
    name: str
    values: list[str]
    logp: list[float]


@dataclass
class MultiVar:
    name: str
    options: list[str]
    ly: list[float]  # log P(yes) per option
    ln: list[float]  # log P(no)
    count: list[float] | None = None  # log p(k selected), k = 0..n (the count question), or None
    lo: int = 0
    hi: int | None = None
    exclusive: tuple = ()  # tuples of options
    requires: tuple = ()  # (option, (needed, ...))


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
    except _Infeasible:
        return False
    return True


class _Infeasible(Exception):
    pass


# -- the solver --------------------------------------------------------------------------------------
def solve(scalars: list[ScalarVar], multis: list[MultiVar], cross: Iterable = (),
          fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """Maximum-score assignment satisfying every constraint: {scalar name: value, multi name: [options]}
    (options in field order). ``fixed`` pins some variables (a scalar to a value, a multi field to a
    selection): the best assignment among those that keep them (dependency waves decided earlier).
    Raises ``_Infeasible`` when none exists (schemas are checked earlier)."""
    cross = list(cross)
    fixed = fixed or {}
    sv = sorted(scalars, key=lambda v: len(v.values))
    s_order = [sorted(range(len(v.values)), key=lambda i: -v.logp[i]) if v.name not in fixed
               else [v.values.index(fixed[v.name])] for v in sv]
    s_max = [max(v.logp) for v in sv]
    s_rest = [sum(s_max[i:]) for i in range(len(sv) + 1)]
    s_index = {v.name: i for i, v in enumerate(sv)}
    m_index = {m.name: i for i, m in enumerate(multis)}
    # multi fields: options in decreasing gain; suffix sums for the bound
    m_order, m_G, m_lnsuf, m_hi = [], [], [], []
    for m in multis:
        n = len(m.options)
        order = sorted(range(n), key=lambda i: -(m.ly[i] - m.ln[i]))
        G = [0.0]
        for i in order:
            G.append(G[-1] + m.ly[i] - m.ln[i])
        suf = [0.0] * (n + 1)
        for j in range(n - 1, -1, -1):
            suf[j] = suf[j + 1] + m.ln[order[j]]
        m_order.append(order)
        m_G.append(G)
        m_lnsuf.append(suf)
        m_hi.append(n if m.hi is None else m.hi)
    m_pos = [{o: i for i, o in enumerate(m.options)} for m in multis]
    m_fix = [None if m.name not in fixed else [o in fixed[m.name] for o in m.options] for m in multis]
    ex_groups = [[frozenset(m_pos[k][o] for o in g) for g in m.exclusive] for k, m in enumerate(multis)]
    reqs = [[(m_pos[k][a], tuple(m_pos[k][b] for b in need)) for a, need in m.requires] for k, m in enumerate(multis)]

    s_val: list[int | None] = [None] * len(sv)
    m_sel: list[list[bool | None]] = [[None] * len(m.options) for m in multis]
    m_depth = [0] * len(multis)  # options assigned (a prefix of m_order)
    m_cnt = [0] * len(multis)
    m_fixed = [0.0] * len(multis)

    def multi_best(k: int) -> float:
        m, d, s = multis[k], m_depth[k], m_cnt[k]
        n = len(m.options)
        if d == n:  # complete: m_fixed already holds the count term
            return m_fixed[k] if m.lo <= s <= m_hi[k] else -math.inf
        r = n - d
        best = -math.inf
        base = m_fixed[k] + m_lnsuf[k][d]
        G = m_G[k]
        for extra in range(max(0, m.lo - s), min(r, m_hi[k] - s) + 1):
            v = base + G[d + extra] - G[d]
            if m.count is not None:
                v += m.count[s + extra]
            if v > best:
                best = v
        return best

    def atom_state(a: Atom) -> bool | None:
        if a.field in s_index:
            i = s_index[a.field]
            if s_val[i] is None:
                return None
            return sv[i].values[s_val[i]] in a.values
        k = m_index[a.field]
        unknown = False
        for o in a.values:
            x = m_sel[k][m_pos[k][o]]
            if x:
                return True
            if x is None:
                unknown = True
        return None if unknown else False

    def violated() -> bool:
        for c in cross:
            if isinstance(c, Implies):
                if atom_state(c.when) is True and atom_state(c.then) is False:
                    return True
            else:
                if all(atom_state(a) is True for a in c.atoms):
                    return True
        return False

    def multi_violated(k: int, i: int) -> bool:
        sel = m_sel[k]
        if m_cnt[k] > m_hi[k] or m_cnt[k] + (len(sel) - m_depth[k]) < multis[k].lo:
            return True
        for g in ex_groups[k]:
            if i in g and sum(1 for j in g if sel[j]) > 1:
                return True
        for a, need in reqs[k]:
            if (a == i or i in need) and sel[a] and any(sel[b] is False for b in need):
                return True
        return False

    steps = [("s", i) for i in range(len(sv))] + [("m", k) for k, m in enumerate(multis) for _ in m.options]
    best = [-math.inf, None]
    nodes = [0]

    def bound(step: int) -> float:
        # scalars are assigned first, so before `step` reaches the multis the unassigned scalars are a suffix
        si = min(step, len(sv))
        b = sum(sv[i].logp[s_val[i]] for i in range(si)) + s_rest[si]
        return b + sum(multi_best(k) for k in range(len(multis)))

    def dfs(step: int, score_scalars: float) -> None:
        nodes[0] += 1
        if nodes[0] > MAX_NODES:
            raise ConstraintSolveError(f"constraint problem over fields {sorted(s_index) + sorted(m_index)} needs "
                                       f"more than {MAX_NODES} search nodes; simplify the constraints")
        b = bound(step)
        if b == -math.inf or (best[1] is not None and b <= best[0]):
            return
        if step == len(steps):
            total = score_scalars + sum(m_fixed)
            best[0] = total
            best[1] = ([sv[i].values[s_val[i]] for i in range(len(sv))], [list(s) for s in m_sel])
            return
        kind, idx = steps[step]
        if kind == "s":
            for vi in s_order[idx]:
                s_val[idx] = vi
                if not violated():
                    dfs(step + 1, score_scalars + sv[idx].logp[vi])
            s_val[idx] = None
            return
        k = idx
        m = multis[k]
        i = m_order[k][m_depth[k]]
        first = m.ly[i] >= m.ln[i]
        m_depth[k] += 1
        for yes in ((first, not first) if m_fix[k] is None else (m_fix[k][i],)):
            m_sel[k][i] = yes
            m_cnt[k] += yes
            m_fixed[k] += m.ly[i] if yes else m.ln[i]
            if m_depth[k] == len(m.options) and m.count is not None:
                m_fixed[k] += m.count[m_cnt[k]]
            if not multi_violated(k, i) and not violated():
                dfs(step + 1, score_scalars)
            if m_depth[k] == len(m.options) and m.count is not None:
                m_fixed[k] -= m.count[m_cnt[k]]
            m_fixed[k] -= m.ly[i] if yes else m.ln[i]
            m_cnt[k] -= yes
        m_sel[k][i] = None
        m_depth[k] -= 1

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, len(steps) + 200))
    try:
        dfs(0, 0.0)
    finally:
        sys.setrecursionlimit(limit)
    if best[1] is None:
        raise _Infeasible()
    svals, msels = best[1]
    out: dict[str, Any] = {v.name: svals[i] for i, v in enumerate(sv)}
    for k, m in enumerate(multis):
        out[m.name] = [o for o, s in zip(m.options, msels[k]) if s]
    return out


def unconstrained(scalars: list[ScalarVar], multis: list[MultiVar]) -> dict[str, Any]:
    """The same objective's winner without any constraint (what ``constraint_changed`` compares with)."""
    free = [MultiVar(m.name, m.options, m.ly, m.ln, m.count) for m in multis]
    return solve(scalars, free, ())


def score(scalars: list[ScalarVar], multis: list[MultiVar], assignment: dict) -> float:
    """The objective of a full assignment (tests, and the brute-force reference)."""
    t = 0.0
    for v in scalars:
        t += v.logp[v.values.index(assignment[v.name])]
    for m in multis:
        sel = set(assignment[m.name])
        t += sum(m.ly[i] if o in sel else m.ln[i] for i, o in enumerate(m.options))
        if m.count is not None:
            t += m.count[len(sel)]
    return t


def satisfied(multis: list[MultiVar], cross: Iterable, assignment: dict) -> bool:
    """Whether a full assignment satisfies every constraint (tests; the reference for the solver)."""
    for m in multis:
        sel = set(assignment[m.name])
        hi = len(m.options) if m.hi is None else m.hi
        if not m.lo <= len(sel) <= hi:
            return False
        if any(len(sel & set(g)) > 1 for g in m.exclusive):
            return False
        if any(a in sel and not set(need) <= sel for a, need in m.requires):
            return False

    def holds(a: Atom) -> bool:
        v = assignment[a.field]
        return bool(set(v) & set(a.values)) if isinstance(v, list) else v in a.values

    for c in cross:
        if isinstance(c, Implies) and holds(c.when) and not holds(c.then):
            return False
        if isinstance(c, Excludes) and all(holds(a) for a in c.atoms):
            return False
    return True
