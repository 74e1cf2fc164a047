"""The score step: every question of a plan scored on each prompt, in batches.

The prompts' shared prefix once and the contexts packed on it (``score.score_contexts``) where they fit,
else batched prefill + rows in chunks (OOM halves a prefill batch). Scores come back per context as
:class:`~typedlm.decide.result.QuestionScore` in plan order (``trie.score_trie`` turns the scored branch
points into each question's constrained log-scores).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..engine import Engine
from .plan import Plan
from .result import QuestionScore
from .passes import ScoreStats, _is_oom, prefill_batch, score_contexts, score_rows
from .trie import score_trie


@dataclass
class Scored:
    """One context's scoring of one plan: question scores in plan order, timings, stats."""
    scores: list
    prefill_s: float
    scoring_s: float
    stats: ScoreStats


def merged_usage(parts: list[dict]) -> dict:
    """Usage of several waves: counts add up, ``chunk_rows`` is the largest, ``waves`` when more than one."""
    out = dict(parts[0])
    for p in parts[1:]:
        for k in ("rows", "scored_tokens", "passes", "oom_retries", "shared_prefix_tokens"):
            out[k] += p[k]
        out["chunk_rows"] = max(out["chunk_rows"], p["chunk_rows"])
    if len(parts) > 1:
        out["waves"] = len(parts)
    return out


def score_prompts(engine: Engine, plan: Plan, ids_all: list[list[int]], packing: str, budget_bytes: int,
                   max_rows: int | None) -> list[Scored]:
    """Every question of ``plan`` scored on each prompt: the prompts' shared prefix once and the contexts
    packed on it (``score_contexts``) where they fit, else batched prefill + rows in chunks."""
    out: list[Scored | None] = [None] * len(ids_all)
    todo = list(range(len(ids_all)))
    stats_all = [ScoreStats() for _ in ids_all]  # a context left to the chunked path keeps its OOM count
    if packing in ("fused", "packed") and max_rows is None:
        times = [{} for _ in ids_all]
        picked = score_contexts(engine, plan, ids_all, fused=packing == "fused", budget_bytes=budget_bytes,
                                stats=stats_all, timings=times)
        todo = [i for i, p in enumerate(picked) if p is None]
        for i, p in enumerate(picked):
            if p is not None:
                out[i] = Scored(_question_scores(plan, p), times[i]["prefill"], times[i]["scoring"], stats_all[i])
        packing = "packed"
    for group in _groups([ids_all[i] for i in todo]):
        group = [todo[g] for g in group]
        stats = [stats_all[i] for i in group]
        t0 = time.perf_counter()
        caches = _prefill_group(engine, [ids_all[i] for i in group], stats[0])
        engine.sync()
        share = (time.perf_counter() - t0) / len(group)  # the shared batched prefill, split evenly
        for i, cache, st in zip(group, caches, stats):
            t1 = time.perf_counter()
            picked = score_rows(engine, plan, cache, len(ids_all[i]), packing=packing, budget_bytes=budget_bytes,
                                max_rows=max_rows, stats=st)
            engine.sync()
            scores = _question_scores(plan, picked)
            out[i] = Scored(scores, share, time.perf_counter() - t1, st)
    return out


def _question_scores(plan: Plan, picked: dict) -> list[QuestionScore]:
    return [question_score(q, qi, picked) for qi, q in enumerate(plan.questions)]


def question_score(q, qi: int, picked: dict) -> QuestionScore:
    local, _full, log_mass = score_trie(q.trie, [picked[(qi, p)] for p in range(len(q.trie.points))])
    return QuestionScore(tuple(local), log_mass)


MAX_BATCH_CONTEXTS = 8
MAX_BATCH_TOKENS = 16384  # padded prompt tokens of one batched prefill


def _groups(ids_all: list[list[int]]) -> list[list[int]]:
    """Consecutive contexts batched for prefill: at most MAX_BATCH_CONTEXTS and MAX_BATCH_TOKENS padded."""
    groups: list[list[int]] = []
    for i, ids in enumerate(ids_all):
        g = groups[-1] if groups else None
        if g is not None and len(g) < MAX_BATCH_CONTEXTS and \
                (len(g) + 1) * max(len(ids), *(len(ids_all[j]) for j in g)) <= MAX_BATCH_TOKENS:
            g.append(i)
        else:
            groups.append([i])
    return groups


def _prefill_group(engine: Engine, ids_list: list[list[int]], stats: ScoreStats) -> list:
    """Batched prefill; out of memory -> halve the batch and retry (counted on the group's first decision)."""
    try:
        return prefill_batch(engine, ids_list)
    except Exception as e:  # noqa: BLE001 - only out-of-memory is retried
        if not _is_oom(e) or len(ids_list) == 1:
            raise
        stats.oom_retries += 1
        half = len(ids_list) // 2
        return _prefill_group(engine, ids_list[:half], stats) + _prefill_group(engine, ids_list[half:], stats)
