"""The constraint step: every field's choice from its final log-probabilities, by the exact solver.

Input: the plan's question scores after prior correction and calibration (log-probabilities, carried as
logs: never through a rounded probability). Output: ``chosen`` and ``free``, field -> candidate *key*
(scalar fields: the choice, booleans ``"true"`` / ``"false"``, :data:`NONE_OF_ABOVE`; multi fields: the
selected options in schema order). ``free`` is each field decided alone, without constraints; ``chosen``
is the joint optimum of the constrained fields (:mod:`typedlm.decide.constraints.solve`) and ``free`` elsewhere.

**The multi-label rule** is the solver's objective for a multi field, constrained or not: the selection
``S`` maximizing ``sum_{o in S} (log P(yes_o) - t) + sum_{o not in S} log P(no_o) + log p_count(|S|)`` —
the count question is a prior over set sizes (not an override), ``t`` the field's decision threshold
in nats of log-odds (``CalibrationBundle.thresholds``: fitted by ``typedlm calibrate``; 0 without a
bundle), and ``min_selected`` / ``max_selected`` bound ``|S|``.
"""

from __future__ import annotations

from typing import Any

from .parse import constrained_fields
from ..logmath import log_softmax
from ..plan import Plan
from .solve import MultiVar, ScalarVar, solve


def variables(plan: Plan, scores: list, thresholds: dict | None = None) -> dict[str, Any]:
    """field -> its solver variable (ScalarVar / MultiVar with the field's own bounds and rules)."""
    thresholds = thresholds or {}
    out: dict[str, Any] = {}
    multi: dict[str, dict] = {}
    for q, s in zip(plan.questions, scores):
        logs = log_softmax(s.log_scores)
        if q.kind == "scalar":
            out[q.field] = ScalarVar(q.field, list(q.keys), logs)
        else:
            m = multi.setdefault(q.field, {"opts": [], "ly": [], "ln": [], "count": None})
            if q.kind == "count":
                m["count"] = logs
            else:
                m["opts"].append(q.option)
                m["ly"].append(logs[0] - thresholds.get(q.field, 0.0))
                m["ln"].append(logs[1])
    for name, m in multi.items():
        f = plan.schema[name]
        out[name] = MultiVar(name, m["opts"], m["ly"], m["ln"], m["count"], f.min_selected, f.max_selected,
                             f.exclusive, f.requires)
    return out


def _alone(v) -> Any:
    if isinstance(v, ScalarVar):
        return v.values[max(range(len(v.values)), key=v.logp.__getitem__)]
    return solve([], [MultiVar(v.name, v.options, v.ly, v.ln, v.count)])[v.name]


def solve_fields(plan: Plan, scores: list, *, fixed: dict | None = None,
                 thresholds: dict | None = None) -> tuple[dict, dict]:
    """(chosen, free): see the module docstring. ``fixed`` pins constrained fields decided in an earlier
    dependency wave (name -> key / selection: :func:`pins`)."""
    vs = variables(plan, scores, thresholds)
    free = {name: _alone(v) for name, v in vs.items()}
    bound = constrained_fields(plan.schema)
    chosen = dict(free)
    if bound:
        group = [vs[n] for n in sorted(bound)]
        chosen.update(solve([v for v in group if isinstance(v, ScalarVar)],
                            [v for v in group if isinstance(v, MultiVar)], plan.schema.constraints, fixed or {}))
    return chosen, free


def pins(plan: Plan, chosen: dict, names) -> dict:
    """The solver's choices of the constrained fields among ``names``: what a later dependency wave keeps
    while it decides the fields conditioned on them."""
    bound = constrained_fields(plan.schema)
    return {n: chosen[n] for n in names if n in bound}
