"""The constraint step: every field's choice from its final log-probabilities, by the exact solver.

Input: the plan's question scores after prior correction and calibration (log-probabilities, carried as
logs: never through a rounded probability). Output: ``chosen`` and ``free``, field -> candidate *key*
(scalar fields: the choice, booleans ``"true"`` / ``"false"``, :data:`NONE_OF_ABOVE`; multi fields: the
selected options in schema order). ``free`` is each field decided alone, without constraints; ``chosen``
is the joint optimum of the constrained fields (:mod:`typedlm.decide.constraints.solve`) and ``free`` elsewhere.

**The multi-label rule** is the solver's objective for a multi field, constrained or not: the selection
``S`` maximizing ``sum_{o in S} (log P(yes_o) - t) + sum_{o not in S} log P(no_o) + log p(|S|)`` —
``log p(k)`` the field's set-size prior under its set rule (:mod:`typedlm.decide.cardinality`: none, the
count question, or a set-size distribution), ``t`` the field's decision threshold in nats of log-odds
(both from the field's :class:`~typedlm.decide.rules.Rule`: fitted by ``typedlm calibrate``; without a
bundle the default set rule and ``t = 0``), and ``min_selected`` / ``max_selected`` bound ``|S|``.
"""

from __future__ import annotations

from typing import Any

from ..logmath import log_softmax
from ..plan import Plan
from ..rules import Rule, count_terms, thresholds as rule_thresholds
from .parse import constrained_fields
from .solve import MultiVar, ScalarVar, solve


def variables(plan: Plan, scores: list, rules: dict[str, Rule]) -> dict[str, Any]:
    """field -> its solver variable (ScalarVar / MultiVar with the field's own bounds and rules)."""
    thresholds = rule_thresholds(rules)
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
    sizes = count_terms({n: rules[n] for n in multi}, {n: m["count"] for n, m in multi.items()})
    for name, m in multi.items():
        f = plan.schema[name]
        out[name] = MultiVar(name, m["opts"], m["ly"], m["ln"], sizes[name], f.min_selected, f.max_selected,
                             f.exclusive, f.requires)
    return out


def _alone(v) -> Any:
    if isinstance(v, ScalarVar):
        return v.values[max(range(len(v.values)), key=v.logp.__getitem__)]
    return solve([], [MultiVar(v.name, v.options, v.ly, v.ln, v.count)])[v.name]


def solve_fields(plan: Plan, scores: list, rules: dict[str, Rule], *, fixed: dict | None = None) -> tuple[dict, dict]:
    """(chosen, free): see the module docstring. ``fixed`` pins constrained fields decided in an earlier
    dependency wave (name -> key / selection: :func:`pins`)."""
    vs = variables(plan, scores, rules)
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
