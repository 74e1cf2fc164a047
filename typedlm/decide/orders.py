"""Candidate-order averaging: every choice field scored in two fixed orders, log-scores averaged by name.

With ``order="averaged"`` a decision does not score the schema in the order it was given. It scores two
*views* of it: the *canonical* schema (each unordered enum / multi field's choices sorted by value) and the
*mirror* (the canonical order reversed), then averages each candidate's log-probability over the two views
and renormalizes per question (a geometric mean of the two distributions). Prior, calibration, constraints and
the result then read the averaged scores in the schema's own order, so the result lists candidates as given.

Two properties follow by construction:

- *order invariance*: any permutation of a field's choices gives the same two views, so the same prompts,
  the same scores and the same decision (within the scoring tolerance);
- *position balance*: each candidate is scored once in position ``i`` and once in ``n - 1 - i``, so a
  primacy / recency bias of the model enters both ends equally.

Ordered enum fields (``ordered: true``, "lowest first") keep their given order in both views: the order is
part of their meaning. The cost: each context is prefilled and scored twice (two prompts: the choices are
listed in the prompt); the schema part of each view's prompt is shared across contexts as usual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .plan import Plan, get_plan
from .passes import ScoreStats
from .result import QuestionScore
from .scoring import Scored
from .schema import DecisionSchema

ORDER_MODES = ("given", "averaged")
DEFAULT_ORDER = "given"  # "averaged" costs two prompts per context (docs/guides/decision-quality.md)


def canonical_schema(schema: DecisionSchema, mirrored: bool = False) -> DecisionSchema:
    """``schema`` with every unordered enum / multi field's choices sorted by value (``mirrored``: reversed)."""
    spec = schema.to_dict()
    for f in schema.fields:
        if not f.choices or f.ordered:
            continue
        ch = spec["fields"][f.name]["choices"]
        keys = sorted(ch, reverse=mirrored)
        spec["fields"][f.name]["choices"] = {k: ch[k] for k in keys} if isinstance(ch, dict) else keys
    return DecisionSchema.coerce(spec)


def view_plans(engine, plan: Plan, order: str) -> tuple[Plan, ...]:
    """The plans a decision scores for ``plan``: itself (``given``), or its canonical and mirrored views."""
    if order == "given":
        return (plan,)
    return tuple(get_plan(engine, canonical_schema(plan.schema, m), plan.scoring, plan.none_of_above)
                 for m in (False, True))


def _normalized(logs: list[float]) -> tuple[float, ...]:
    m = max(logs)
    z = m + math.log(sum(math.exp(x - m) for x in logs))
    return tuple(x - z for x in logs)


def average(plan: Plan, views: list[tuple[Plan, list]]) -> list:
    """Per-question scores of ``plan`` (its question order, its candidate order) from each view's scores:
    each candidate's log-score averaged over the views by name, renormalized over the question's candidates.
    ``views``: (view plan, that plan's per-question scores: QuestionScores or tuples of log-probabilities).
    One view is returned as it is."""
    if len(views) == 1 and views[0][0] is plan:
        return list(views[0][1])
    tuples = not isinstance(views[0][1][0], QuestionScore)
    where = [{(q.field, q.kind, q.option): i for i, q in enumerate(vp.questions)} for vp, _ in views]
    out = []
    for q in plan.questions:
        cols, mass = [], 0.0
        for (vp, sc), at in zip(views, where):
            j = at[(q.field, q.kind, q.option)]
            s = sc[j]
            logs = s if tuples else s.log_scores
            by_key = dict(zip(vp.questions[j].keys, logs))
            cols.append([by_key[k] for k in q.keys])
            mass += 0.0 if tuples else s.log_legal_mass
        mean = _normalized([sum(c) / len(cols) for c in zip(*cols)])
        out.append(mean if tuples else QuestionScore(mean, mass / len(cols)))
    return out


@dataclass
class Views:
    """One wave's scoring of every context in each view: the view plans and, per view, each context's prompt
    ids and :class:`~typedlm.decide.scoring.Scored`."""
    plans: tuple[Plan, ...]
    ids: list[list[list[int]]]  # [view][context] prompt ids
    scored: list[list]  # [view][context] Scored

    def context_views(self, i: int) -> list[tuple[Plan, list]]:
        return [(p, s[i].scores) for p, s in zip(self.plans, self.scored)]


def merged_stats(parts: list[ScoreStats]) -> ScoreStats:
    """The scoring work of several views of one context, counted together."""
    if len(parts) == 1:
        return parts[0]
    out = ScoreStats(packing=parts[0].packing)
    for p in parts:
        for k in ("rows", "scored_tokens", "passes", "oom_retries", "shared_prefix_tokens"):
            setattr(out, k, getattr(out, k) + getattr(p, k))
        out.chunk_rows = max(out.chunk_rows, p.chunk_rows)
    return out


def combined(plan: Plan, views: Views, i: int):
    """Context ``i``'s :class:`~typedlm.decide.scoring.Scored` for ``plan``: the one view's own, or the views'
    scores averaged (:func:`average`) with their timings and work added up."""
    parts = [s[i] for s in views.scored]
    if len(parts) == 1 and views.plans[0] is plan:
        return parts[0]
    return Scored(average(plan, views.context_views(i)), sum(p.prefill_s for p in parts),
                  sum(p.scoring_s for p in parts), merged_stats([p.stats for p in parts]))
