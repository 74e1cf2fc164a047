"""Prior correction without labels: divide each question's prior out of its distribution.

``prior="neutral"`` (contextual calibration, Zhao et al. 2021): the plan is scored once with the
content-free contexts :data:`CONTENT_FREE`; their probabilities are averaged per question into a prior
``q``, and a decision's probabilities become ``p(c) / q(c)`` renormalized (in logs: ``log p - log q``,
then normalized over the question's candidates). The prior is cached per (model fingerprint, plan,
prompt version): the second decision on the same plan scores no content-free rows.

``prior="batch"`` (batch calibration, Zhou et al. 2024, ``decide_many`` only): ``q`` is the mean of
the batch's own probabilities per question. It needs at least :data:`MIN_BATCH` contexts.

Both work per question, so multi options (yes/no) and the count question are corrected too. Legal
mass is left as scored.

**Multi fields are then centred per context** (:func:`centre`, both modes): each option's log-odds
``log P(yes) - log P(no)`` minus the mean over the field's options in that context. Real text lifts "yes"
on *every* option over the content-free prompts, so after the neutral prior nearly every option would
still have P(yes) > 0.5; the shift is shared by the options, so removing the per-context mean keeps the
ranking (per-option AUC up to 0.86 vs 0.73 raw) and leaves the set size to the count question, which the
decision rule uses as a prior over set sizes (:mod:`typedlm.decide.constraints.joint`).
"""

from __future__ import annotations

import hashlib
import math

from ..engine import Engine
from ..errors import TypedLMError
from .logmath import log_sigmoid, softmax
from .prompt import content_free_ids
from .result import QuestionScore

PRIOR_MODES = ("none", "neutral", "batch")
AUTO = {"boolean": "none", "enum": "neutral", "multi": "neutral"}  # prior "auto": the mode per field type
DEFAULT_PRIOR = "auto"  # chosen per field type on the calibration splits (docs/guides/decision-quality.md)
CONTENT_FREE = ("N/A", "", "[MASK]")
MIN_BATCH = 2

stats = {"hits": 0, "misses": 0}  # neutral prior cache counters (tests, bench); the cache: engine.caches.priors


class PriorError(TypedLMError):
    """A prior mode that cannot be used here (unknown, or "batch" with fewer than MIN_BATCH contexts)."""


def check_mode(prior: str, n_contexts: int | None = None) -> str:
    if prior not in PRIOR_MODES and prior != "auto":
        raise PriorError(f"prior must be auto or one of {', '.join(PRIOR_MODES)}, got {prior!r}")
    if prior == "batch" and n_contexts is not None and n_contexts < MIN_BATCH:
        raise PriorError(f"prior='batch' estimates the prior from the batch itself: give decide_many at least "
                           f"{MIN_BATCH} contexts (got {n_contexts}), or use prior='neutral'")
    return prior


def field_mode(prior: str, ftype: str) -> str:
    """The prior mode a field of type ``ftype`` gets under the option ``prior`` (``auto``: :data:`AUTO`)."""
    return AUTO[ftype] if prior == "auto" else prior


def batch_chunks(n: int, size: int, prior: str) -> list[tuple[int, int]]:
    """(start, end) of each decide_many call; with prior="batch" a last chunk of one context joins the one before
    (the batch prior needs at least two)."""
    out = [(i, min(i + size, n)) for i in range(0, n, size)]
    if prior == "batch" and len(out) > 1 and out[-1][1] - out[-1][0] == 1:
        out[-2:] = [(out[-2][0], n)]
    return out


def fingerprint(engine: Engine) -> str:
    """A short hash of the model: vocabulary size, every weight's name and shape and its first 64 values
    (the same for a model and its saved copy; computed once per engine, kept in ``engine.caches``)."""
    fp = engine.caches.fingerprint
    if fp is None:
        h = hashlib.sha256()
        h.update(str(engine.tokenizer_vocab_size).encode())
        for name, shape, head in engine.runner.weight_samples(64):
            h.update(name.encode())
            h.update(str(shape).encode())
            h.update(head.tobytes())
        fp = engine.caches.fingerprint = h.hexdigest()[:16]
    return fp


def plan_key(plan) -> tuple:
    return (plan.schema.key, plan.scoring, plan.none_of_above)


def neutral(engine: Engine, plan, score_prompts, prompt_version: str) -> list[tuple[float, ...]]:
    """Per question log prior from the content-free contexts (cached). ``score_prompts(ids_list)`` scores
    the plan on token-id prompts and returns per-context question scores."""
    def build():
        stats["misses"] += 1
        return mean_log_probs(score_prompts([content_free_ids(engine, plan, c) for c in CONTENT_FREE]))

    misses = stats["misses"]
    logs = engine.caches.priors.get_or_build((plan_key(plan), prompt_version), build)
    stats["hits"] += stats["misses"] == misses
    return logs


def mean_log_probs(scored: list[list[QuestionScore]]) -> list[tuple[float, ...]]:
    """log of the mean probability per question and candidate over several contexts' scores."""
    out = []
    for qi in range(len(scored[0])):
        rows = [softmax(s[qi].log_scores) for s in scored]
        out.append(tuple(math.log(max(sum(col) / len(col), 1e-300)) for col in zip(*rows)))
    return out


def correct(scores: list[QuestionScore], prior_logs: list[tuple[float, ...]],
            questions: list[int] | None = None) -> list[QuestionScore]:
    """``log p - log q`` renormalized per question (only ``questions`` when given)."""
    out = list(scores)
    for qi in (range(len(scores)) if questions is None else questions):
        s = scores[qi]
        adj = [a - b for a, b in zip(s.log_scores, prior_logs[qi])]
        m = max(adj)
        z = m + math.log(sum(math.exp(x - m) for x in adj))
        out[qi] = QuestionScore(tuple(x - z for x in adj), s.log_legal_mass)
    return out


def adjust(plan, scores: list[QuestionScore], mode: str, logs: list | None) -> list[QuestionScore]:
    """The prior step with one mode for every field (:func:`adjust_fields`)."""
    return adjust_fields(plan, scores, {q.field: mode for q in plan.questions}, {mode: logs})


def adjust_fields(plan, scores: list[QuestionScore], modes: dict[str, str], logs: dict) -> list[QuestionScore]:
    """The prior step, field by field: each field's questions corrected by its mode's per-question log prior
    (``logs[mode]``, over this plan's questions; mode "none": left as scored), then the multi fields of a
    mode other than "none" centred (:func:`centre`)."""
    out = list(scores)
    for mode in sorted(set(modes.values()) - {"none"}):
        out = correct(out, logs[mode], [i for i, q in enumerate(plan.questions) if modes.get(q.field) == mode])
    return centre(plan, out, {f for f, m in modes.items() if m != "none"})


def centre(plan, scores: list[QuestionScore], fields=None) -> list[QuestionScore]:
    """Each multi field's (of ``fields``, default all) option log-odds minus their mean over the field's options
    (this context)."""
    out = list(scores)
    groups: dict[str, list[int]] = {}
    for i, q in enumerate(plan.questions):
        if q.kind == "option" and (fields is None or q.field in fields):
            groups.setdefault(q.field, []).append(i)
    for idx in groups.values():
        z = [scores[i].log_scores[0] - scores[i].log_scores[1] for i in idx]
        mean = sum(z) / len(z)
        for i, zi in zip(idx, z):
            out[i] = QuestionScore((log_sigmoid(zi - mean), log_sigmoid(mean - zi)), scores[i].log_legal_mass)
    return out


