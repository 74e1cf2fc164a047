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
    search = _Search(scalars, multis, list(cross), fixed or {})
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, len(search.steps) + 200))
    try:
        search.dfs(0, 0.0)
    finally:
        sys.setrecursionlimit(limit)
    if search.best is None:
        raise Infeasible()
    svals, msels = search.best
    out: dict[str, Any] = {v.name: svals[i] for i, v in enumerate(search.sv)}
    for k, m in enumerate(multis):
        out[m.name] = [o for o, s in zip(m.options, msels[k]) if s]
    return out


class _MultiOrder:
    """A multi field's options in decreasing gain log P(yes) - log P(no), with the prefix sums of the gains
    (``G``) and the suffix sums of log P(no) (``lnsuf``) the bound reads."""

    def __init__(self, m: MultiVar):
        n = len(m.options)
        self.order = sorted(range(n), key=lambda i: -(m.ly[i] - m.ln[i]))
        self.G = [0.0]
        for i in self.order:
            self.G.append(self.G[-1] + m.ly[i] - m.ln[i])
        self.lnsuf = [0.0] * (n + 1)
        for j in range(n - 1, -1, -1):
            self.lnsuf[j] = self.lnsuf[j + 1] + m.ln[self.order[j]]
        self.hi = n if m.hi is None else m.hi


class _Search:
    """The state of one branch-and-bound search: scalars branch first, then each multi field's options."""

    def __init__(self, scalars: list[ScalarVar], multis: list[MultiVar], cross: list, fixed: dict[str, Any]):
        self.multis, self.cross = multis, cross
        self.sv = sv = sorted(scalars, key=lambda v: len(v.values))
        self.s_order = [sorted(range(len(v.values)), key=lambda i: -v.logp[i]) if v.name not in fixed
                        else [v.values.index(fixed[v.name])] for v in sv]
        s_max = [max(v.logp) for v in sv]
        self.s_rest = [sum(s_max[i:]) for i in range(len(sv) + 1)]
        self.s_index = {v.name: i for i, v in enumerate(sv)}
        self.m_index = {m.name: i for i, m in enumerate(multis)}
        self.mo = [_MultiOrder(m) for m in multis]
        self.m_pos = m_pos = [{o: i for i, o in enumerate(m.options)} for m in multis]
        self.m_fix = [None if m.name not in fixed else [o in fixed[m.name] for o in m.options] for m in multis]
        self.ex_groups = [[frozenset(m_pos[k][o] for o in g) for g in m.exclusive] for k, m in enumerate(multis)]
        self.reqs = [[(m_pos[k][a], tuple(m_pos[k][b] for b in need)) for a, need in m.requires]
                     for k, m in enumerate(multis)]
        self.s_val: list[int | None] = [None] * len(sv)
        self.m_sel: list[list[bool | None]] = [[None] * len(m.options) for m in multis]
        self.m_depth = [0] * len(multis)  # options assigned (a prefix of the field's order)
        self.m_cnt = [0] * len(multis)
        self.m_fixed = [0.0] * len(multis)
        self.steps = [("s", i) for i in range(len(sv))] + [("m", k) for k, m in enumerate(multis) for _ in m.options]
        self.best_score, self.best = -math.inf, None
        self.nodes = 0

    def multi_best(self, k: int) -> float:
        """The best score field ``k`` can still reach alone: the best count within its bounds, taking the
        best remaining gains (exact for the field, O(remaining))."""
        m, d, s, mo = self.multis[k], self.m_depth[k], self.m_cnt[k], self.mo[k]
        n = len(m.options)
        if d == n:  # complete: m_fixed already holds the count term
            return self.m_fixed[k] if m.lo <= s <= mo.hi else -math.inf
        best = -math.inf
        base = self.m_fixed[k] + mo.lnsuf[d]
        for extra in range(max(0, m.lo - s), min(n - d, mo.hi - s) + 1):
            v = base + mo.G[d + extra] - mo.G[d]
            if m.count is not None:
                v += m.count[s + extra]
            if v > best:
                best = v
        return best

    def atom_state(self, a: Atom) -> bool | None:
        """An atom on the partial assignment, in three-valued logic (None: not decided yet)."""
        if a.field in self.s_index:
            i = self.s_index[a.field]
            if self.s_val[i] is None:
                return None
            return self.sv[i].values[self.s_val[i]] in a.values
        k = self.m_index[a.field]
        unknown = False
        for o in a.values:
            x = self.m_sel[k][self.m_pos[k][o]]
            if x:
                return True
            if x is None:
                unknown = True
        return None if unknown else False

    def violated(self) -> bool:
        """A cross-field constraint already decided false."""
        for c in self.cross:
            if isinstance(c, Implies):
                if self.atom_state(c.when) is True and self.atom_state(c.then) is False:
                    return True
            elif all(self.atom_state(a) is True for a in c.atoms):
                return True
        return False

    def multi_violated(self, k: int, i: int) -> bool:
        """Field ``k``'s own constraints broken by the choice just made for option ``i``."""
        sel = self.m_sel[k]
        if self.m_cnt[k] > self.mo[k].hi or self.m_cnt[k] + (len(sel) - self.m_depth[k]) < self.multis[k].lo:
            return True
        for g in self.ex_groups[k]:
            if i in g and sum(1 for j in g if sel[j]) > 1:
                return True
        for a, need in self.reqs[k]:
            if (a == i or i in need) and sel[a] and any(sel[b] is False for b in need):
                return True
        return False

    def bound(self, step: int) -> float:
        """An admissible bound on any completion: scalars are assigned first, so before ``step`` reaches the
        multis the unassigned scalars are a suffix."""
        si = min(step, len(self.sv))
        b = sum(self.sv[i].logp[self.s_val[i]] for i in range(si)) + self.s_rest[si]
        return b + sum(self.multi_best(k) for k in range(len(self.multis)))

    def dfs(self, step: int, score_scalars: float) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ConstraintSolveError(f"constraint problem over fields {sorted(self.s_index) + sorted(self.m_index)}"
                                       f" needs more than {MAX_NODES} search nodes; simplify the constraints")
        b = self.bound(step)
        if b == -math.inf or (self.best is not None and b <= self.best_score):
            return
        if step == len(self.steps):
            self.best_score = score_scalars + sum(self.m_fixed)
            self.best = ([self.sv[i].values[self.s_val[i]] for i in range(len(self.sv))],
                         [list(s) for s in self.m_sel])
            return
        kind, idx = self.steps[step]
        if kind == "s":
            self.branch_scalar(step, idx, score_scalars)
        else:
            self.branch_option(step, idx, score_scalars)

    def branch_scalar(self, step: int, idx: int, score_scalars: float) -> None:
        """Each value of scalar ``idx``, best first (only its pin when fixed)."""
        for vi in self.s_order[idx]:
            self.s_val[idx] = vi
            if not self.violated():
                self.dfs(step + 1, score_scalars + self.sv[idx].logp[vi])
        self.s_val[idx] = None

    def branch_option(self, step: int, k: int, score_scalars: float) -> None:
        """The next option of multi field ``k`` in gain order: its likelier answer first (only its pin when
        fixed); the count term joins the field's score when its last option is assigned."""
        m = self.multis[k]
        i = self.mo[k].order[self.m_depth[k]]
        first = m.ly[i] >= m.ln[i]
        self.m_depth[k] += 1
        complete = self.m_depth[k] == len(m.options) and m.count is not None
        for yes in ((first, not first) if self.m_fix[k] is None else (self.m_fix[k][i],)):
            self.m_sel[k][i] = yes
            self.m_cnt[k] += yes
            self.m_fixed[k] += m.ly[i] if yes else m.ln[i]
            if complete:
                self.m_fixed[k] += m.count[self.m_cnt[k]]
            if not self.multi_violated(k, i) and not self.violated():
                self.dfs(step + 1, score_scalars)
            if complete:
                self.m_fixed[k] -= m.count[self.m_cnt[k]]
            self.m_fixed[k] -= m.ly[i] if yes else m.ln[i]
            self.m_cnt[k] -= yes
        self.m_sel[k][i] = None
        self.m_depth[k] -= 1


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
