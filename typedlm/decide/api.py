"""``decide`` / ``decide_many``: schema + context -> Decision, by one prefill and batched row scoring;
``naive_generate``: the same fields generated as JSON under the JSON-Schema grammar (the baseline)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..engine import Engine
from ..errors import TypedLMError
from .depends import given_text, waves as dependency_waves
from .calibration import load_bundle
from .plan import DEFAULT_SCORING, NONE_OF_ABOVE, Plan, get_plan
from .prior import DEFAULT_PRIOR, check_mode as check_prior, correct as correct_prior, fingerprint, mean_log_probs, \
    neutral as neutral_prior
from .prompt import PROMPT_VERSION, prompt_ids, prompt_kwargs
from .result import Decision, QuestionScore, finish_decision
from .schema import DecisionSchema
from .score import DEFAULT_BUDGET_BYTES, DEFAULT_PACKING, ScoreStats, _is_oom, prefill_batch, resolve_packing, \
    score_contexts, score_rows
from .ties import drift, near_ties, rescore_one_row
from .trie import score_trie


def _engine(engine: Engine | None) -> Engine:
    if engine is not None:
        return engine
    from ..generate.api import default_engine

    return default_engine()


def _options(abstain_below_margin: float | None) -> None:
    if abstain_below_margin is not None and not (0.0 <= float(abstain_below_margin) <= 1.0):
        raise TypedLMError(f"abstain_below_margin must be in [0, 1], got {abstain_below_margin}")


def plan_for(schema: Any, engine: Engine, scoring: str = DEFAULT_SCORING, allow_none_of_above: bool = False) -> Plan:
    return get_plan(engine, DecisionSchema.coerce(schema), scoring, allow_none_of_above)


def decide(schema: Any, context: str, *, engine: Engine | None = None, scoring: str = DEFAULT_SCORING,
           allow_none_of_above: bool = False, abstain_below_margin: float | None = None,
           packing: str = DEFAULT_PACKING, budget_bytes: int = DEFAULT_BUDGET_BYTES,
           max_rows: int | None = None, prior: str = DEFAULT_PRIOR, calibration: Any = None) -> Decision:
    """Decide every field of ``schema`` (a Pydantic model class, a schema dict / JSON, or a
    DecisionSchema) about ``context``. ``max_rows=1`` scores one row per forward (the parity reference).
    ``prior="neutral"`` divides out the content-free prior; ``calibration`` is a CalibrationBundle
    (or its JSON / path) made for this model, prompt version, scoring and prior mode."""
    return decide_many(schema, [context], engine=engine, scoring=scoring, allow_none_of_above=allow_none_of_above,
                       abstain_below_margin=abstain_below_margin, packing=packing, budget_bytes=budget_bytes,
                       max_rows=max_rows, prior=prior, calibration=calibration)[0]


def check_options(engine: Engine, plan: Plan, prior: str, calibration: Any, n_contexts: int):
    """The prior mode and the calibration bundle (loaded and matched to this engine, plan and prior),
    checked before any model work; returns the bundle or None."""
    check_prior(prior, n_contexts)
    if calibration is None:
        return None
    bundle = load_bundle(calibration)
    bundle.check(model_hash=fingerprint(engine), prompt_version=PROMPT_VERSION, scoring=plan.scoring, prior=prior,
                 schema=plan.schema)
    return bundle


@dataclass
class _Scored:
    """One context's scoring of one plan: question scores in plan order, timings, stats."""
    scores: list
    prefill_s: float
    scoring_s: float
    stats: ScoreStats


def decide_many(schema: Any, contexts: list[str], *, engine: Engine | None = None, scoring: str = DEFAULT_SCORING,
                allow_none_of_above: bool = False, abstain_below_margin: float | None = None,
                packing: str = DEFAULT_PACKING, budget_bytes: int = DEFAULT_BUDGET_BYTES,
                max_rows: int | None = None, prior: str = DEFAULT_PRIOR, calibration: Any = None) -> list[Decision]:
    """One compiled plan shared by every context. Contexts are prefilled together in right-padded
    batches (each prompt once); each context's rows are then scored in batched passes on its prefix.
    Fields with ``depends_on`` are scored in later waves whose prompts give the parents' values.
    ``prior="batch"`` estimates each question's prior from this batch's own scores."""
    if isinstance(contexts, str) or not isinstance(contexts, (list, tuple)):
        raise TypedLMError("contexts must be a list of strings")
    _options(abstain_below_margin)
    t0 = time.perf_counter()
    engine = _engine(engine)
    plan = plan_for(schema, engine, scoring, allow_none_of_above)
    bundle = check_options(engine, plan, prior, calibration, len(contexts))
    waves = dependency_waves(plan.schema)
    # wave 0 is the whole plan (its prompt and scores are those of a decision without dependencies; the
    # children's first-pass scores are then replaced); later waves score their fields on "Given:" prompts
    sub = [plan] + [get_plan(engine, plan.schema.subset(w), scoring, allow_none_of_above)
                    for w in waves[1:]]
    ids_all = [prompt_ids(engine, sub[0], c) for c in contexts]  # validate every context before any model work
    longest = max((len(r.ids) for r in plan.rows), default=0)
    for ids in ids_all:
        if len(ids) + longest > engine.max_context:
            raise TypedLMError(f"decision prompt + rows need {len(ids) + longest} tokens; the model's context is "
                               f"{engine.max_context}")
    packing = resolve_packing(packing, engine)
    prior_logs = None
    if prior == "neutral":
        prior_logs = neutral_prior(engine, plan, lambda ids: [s.scores for s in _score_prompts(
            engine, plan, ids, packing, budget_bytes, max_rows)], PROMPT_VERSION)
    compile_s = time.perf_counter() - t0
    final = [[None] * len(plan.questions) for _ in contexts]
    runs: list[list[_Scored]] = [[] for _ in contexts]
    records = [{} for _ in contexts]
    values: list[dict] = [{} for _ in contexts]
    index = {(q.field, q.kind, q.option): i for i, q in enumerate(plan.questions)}
    for k, (wave, wplan) in enumerate(zip(waves, sub)):
        if k == 0:
            ids_k = ids_all
        else:
            ids_k = [prompt_ids(engine, wplan, c, given_text(plan.schema, values[i], wave))
                     for i, c in enumerate(contexts)]
        scored = _score_prompts(engine, wplan, ids_k, packing, budget_bytes, max_rows)
        where = [index[(q.field, q.kind, q.option)] for q in wplan.questions]
        wave_scores = [s.scores for s in scored]
        if prior == "batch":
            batch_logs = mean_log_probs(wave_scores)

        def adjust(sc):
            if prior_logs is not None:
                return correct_prior(sc, [prior_logs[j] for j in where])
            return correct_prior(sc, batch_logs) if prior == "batch" else sc

        for i, s in enumerate(scored):
            sc = adjust(s.scores)
            ties = near_ties(wplan, sc, wave, drift(engine)) if k == 0 and max_rows != 1 else []
            if ties:  # the batch shape could pick these winners: score them one row at a time
                picked = rescore_one_row(engine, wplan, ids_k[i], ties, s.stats)
                sc = adjust([_question_score(q, qi, picked) if q.field in ties else old
                             for qi, (q, old) in enumerate(zip(wplan.questions, s.scores))])
            if bundle is not None:
                sc = bundle.apply(wplan, sc)
            for j, qs in zip(where, sc):
                final[i][j] = qs
            runs[i].append(s)
            for name in (wave if k else plan.schema.names):
                source = "dependency" if k else "rescored_one_row" if name in ties else "batched"
                records[i][name] = {"score_source": source, "prior": prior,
                                    **(bundle.record(name) if bundle is not None else {})}
            if k + 1 < len(waves):  # the parents' values for the next wave's "Given:" line
                values[i].update(finish_decision(wplan, sc, timings={}, usage={}, model=engine.name,
                                                 abstain_below_margin=abstain_below_margin).value_dict())
    out = []
    for i, ids in enumerate(ids_all):
        rs = runs[i]
        prefill_s = sum(r.prefill_s for r in rs)
        scoring_s = sum(r.scoring_s for r in rs)
        timings = {"compile": compile_s, "prefill": prefill_s, "scoring": scoring_s,
                   "total": compile_s + prefill_s + scoring_s}
        usage = {"prompt_tokens": len(ids), **_merged_usage([r.stats.as_dict() for r in rs])}
        out.append(finish_decision(plan, final[i], timings=timings, usage=usage, model=engine.name,
                                   abstain_below_margin=abstain_below_margin, records=records[i]))
        compile_s = 0.0
    return out


def _merged_usage(parts: list[dict]) -> dict:
    """Usage of several waves: counts add up, ``chunk_rows`` is the largest, ``waves`` when more than one."""
    out = dict(parts[0])
    for p in parts[1:]:
        for k in ("rows", "scored_tokens", "passes", "oom_retries", "shared_prefix_tokens"):
            out[k] += p[k]
        out["chunk_rows"] = max(out["chunk_rows"], p["chunk_rows"])
    if len(parts) > 1:
        out["waves"] = len(parts)
    return out


def _score_prompts(engine: Engine, plan: Plan, ids_all: list[list[int]], packing: str, budget_bytes: int,
                   max_rows: int | None) -> list[_Scored]:
    """Every question of ``plan`` scored on each prompt: the prompts' shared prefix once and the contexts
    packed on it (``score_contexts``) where they fit, else batched prefill + rows in chunks."""
    out: list[_Scored | None] = [None] * len(ids_all)
    todo = list(range(len(ids_all)))
    stats_all = [ScoreStats() for _ in ids_all]  # a context left to the chunked path keeps its OOM count
    if packing in ("fused", "packed") and max_rows is None:
        times = [{} for _ in ids_all]
        picked = score_contexts(engine, plan, ids_all, fused=packing == "fused", budget_bytes=budget_bytes,
                                stats=stats_all, timings=times)
        todo = [i for i, p in enumerate(picked) if p is None]
        for i, p in enumerate(picked):
            if p is not None:
                out[i] = _Scored(_question_scores(plan, p), times[i]["prefill"], times[i]["scoring"], stats_all[i])
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
            out[i] = _Scored(scores, share, time.perf_counter() - t1, st)
    return out


def _question_scores(plan: Plan, picked: dict) -> list[QuestionScore]:
    return [_question_score(q, qi, picked) for qi, q in enumerate(plan.questions)]


def _question_score(q, qi: int, picked: dict) -> QuestionScore:
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


# -- the naive baseline ------------------------------------------------------------------------------
def naive_json_schema(plan: Plan) -> dict:
    """JSON Schema of the answer the prompt describes: the same keys and values that rows score."""
    props: dict = {}
    for f in plan.schema.fields:
        if f.type == "boolean":
            props[f.name] = {"type": "boolean"}
            continue
        shown = [plan.shown(f.name, v) for v, _ in plan.choices(f)]
        if f.type == "enum":
            props[f.name] = {"enum": shown}
        else:
            props[f.name] = {"type": "object", "properties": {s: {"type": "boolean"} for s in shown},
                             "required": shown, "additionalProperties": False}
            props[f"{f.name}.count"] = {"enum": list(range(len(shown) + 1))}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def naive_generate(schema: Any, context: str, *, engine: Engine | None = None, scoring: str = DEFAULT_SCORING,
                   allow_none_of_above: bool = False, max_tokens: int | None = None):
    """Baseline: greedy generation of the whole answer as JSON under the JSON-Schema grammar, same prompt."""
    from ..generate.api import generate

    engine = _engine(engine)
    plan = plan_for(schema, engine, scoring, allow_none_of_above)
    kw = prompt_kwargs(engine, plan, context)
    if max_tokens is None:
        max_tokens = 32 + 16 * sum(1 + len(f.choices) for f in plan.schema.fields)
    return generate(**kw, engine=engine, json_schema=naive_json_schema(plan), any_whitespace=False,
                    temperature=0.0, max_tokens=max_tokens)


__all__ = ["NONE_OF_ABOVE", "check_options", "decide", "decide_many", "naive_generate", "naive_json_schema", "plan_for"]
