"""The exact solver of a decision's joint assignment: maximum total log-probability under the constraints.

The score of an assignment is the sum of the fields' log-probabilities: a scalar field's log p(value); a
multi field's sum of log P(yes) / log P(no) per option plus the count question's log p(|selection|) (the
count row as a prior over set sizes). Every multi field is decided by this objective, constrained or not
(an unconstrained multi field is a problem of its own: the best ``k`` and its ``k`` best options).

:func:`solve` is **exact**: depth-first branch and bound with an admissible bound (never a greedy
repair). Scalar variables branch first (values best first); a multi field's options branch in order of
decreasing gain log P(yes) - log P(no), so the unassigned options are always a suffix of that order and
the bound for the field — the best count ``k`` within its bounds, choosing the ``k`` best remaining gains —
is exact for the field alone and computed in O(remaining). Cross-field constraints are evaluated on partial
assignments in three-valued logic and prune as soon as they are decided false. Variables pinned by
``fixed`` (constrained fields a dependency wave already decided) branch only on their value; the bounds
relax the pin, so stay admissible.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Iterable

from ...errors import TypedLMError
from .terms import Atom, Excludes, Implies

MAX_NODES = 200_000  # search nodes per solve; past it the problem is refused, never answered greedily


class ConstraintSolveError(TypedLMError):
    """The constraint problem is too large to solve exactly within MAX_NODES search nodes."""


class Infeasible(Exception):
    """No assignment satisfies the constraints (schemas are checked when built, so only checks see it)."""


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



# -- the solver --------------------------------------------------------------------------------------
def solve(scalars: list[ScalarVar], multis: list[MultiVar], cross: Iterable = (),
          fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """Maximum-score assignment satisfying every constraint: {scalar name: value, multi name: [options]}
    (options in field order). ``fixed`` pins some variables (a scalar to a value, a multi field to a
    selection): the best assignment among those that keep them (dependency waves decided earlier).
    Raises ``Infeasible`` when none exists (schemas are checked earlier)."""
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
        raise Infeasible()
    svals, msels = best[1]
    out: dict[str, Any] = {v.name: svals[i] for i, v in enumerate(sv)}
    for k, m in enumerate(multis):
        out[m.name] = [o for o, s in zip(m.options, msels[k]) if s]
    return out


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
