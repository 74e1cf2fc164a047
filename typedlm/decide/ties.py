"""Near-tie safety: a field whose batched top-2 gap is within the batch-shape drift is rescored one row
at a time, and its record says so (``score_source="rescored_one_row"``).

Batched passes (packed / fused / shared-prefix / expand) and one row per forward give the same
log-scores only up to the kernels' reduction order (the parity line of ``typedlm bench decide``:
:data:`DRIFT_NATS` per dtype). Where two candidates are closer than that, the batch
shape alone could pick the winner; those fields are scored again on the one-row path
(``packing="expand", max_rows=1``: the parity reference), so the answer does not depend on how many
contexts or rows shared the pass.

With the runner's batch-invariant mode (``typedlm/runner/invariant/``, default on for the torch runner;
``TYPEDLM_BATCH_INVARIANT=0`` off) a batched pass and a one-row pass give the same bits, so nothing is a
near tie (:func:`drift` is ``-inf``) and no field is rescored: exact by construction
(``bench/gpu_check.py ARCH invariance`` checks it on CUDA). The rescoring stays
the fallback where invariance is unavailable (the MLX runner, a model the hooks cannot take, the switch off).
"""

from __future__ import annotations

import math

import torch

from ..engine import Engine
from .passes import ScoreStats, prefill, score_rows
from .plan import Plan
from .result import QuestionScore

# nats: the batch-shape drift per dtype, rounded up (see the module docstring)
DRIFT_NATS = {torch.float32: 5e-5, torch.float64: 5e-5, torch.bfloat16: 0.25, torch.float16: 0.25}


def invariant(engine: Engine) -> bool:
    """Are the engine's scoring passes batch-invariant? (the MLX runner has no such mode)"""
    return engine.runner.capabilities.invariant


def drift(engine: Engine) -> float:
    """How far a batched log-score may be from its one-row value: ``-inf`` (no near ties) when invariant."""
    if invariant(engine):
        return -math.inf
    return DRIFT_NATS.get(engine.dtype, DRIFT_NATS[torch.bfloat16])


def near_ties(plan: Plan, scores: list[QuestionScore], fields, threshold: float) -> list[str]:
    """Fields (among ``fields``) with a question whose two best log-scores are within ``threshold``."""
    out = []
    for name in fields:
        for q, s in zip(plan.questions, scores):
            if q.field == name and len(s.log_scores) > 1:
                a, b = sorted(s.log_scores, reverse=True)[:2]
                if a - b <= threshold:
                    out.append(name)
                    break
    return out


def rescore_one_row(engine: Engine, plan: Plan, ids: list[int], fields: list[str], stats: ScoreStats) -> dict:
    """{question index: picked children log-probs} for every row of ``fields``, one row per forward on
    a fresh prefill of ``ids`` (counted in ``stats``)."""
    keep = {i for i, q in enumerate(plan.questions) if q.field in fields}
    sub = Plan(schema=plan.schema, scoring=plan.scoring, none_of_above=plan.none_of_above, questions=plan.questions,
               rows=tuple(r for r in plan.rows if r.question in keep), codes=plan.codes)
    cache = prefill(engine, ids)
    one = ScoreStats()
    picked = score_rows(engine, sub, cache, len(ids), packing="expand", max_rows=1, stats=one)
    stats.passes += one.passes
    stats.rows += one.rows
    stats.scored_tokens += one.scored_tokens
    return picked
