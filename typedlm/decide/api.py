"""``decide`` / ``decide_many``: schema + context -> Decision, by one prefill and batched row scoring;
``naive_generate``: the same fields generated as JSON under the JSON-Schema grammar (the baseline)."""

from __future__ import annotations

import time
from typing import Any

from ..engine import Engine
from ..errors import TypedLMError
from .plan import DEFAULT_SCORING, NONE_OF_ABOVE, Plan, get_plan
from .prompt import prompt_ids, prompt_kwargs
from .result import Decision, QuestionScore, finish_decision
from .schema import DecisionSchema
from .score import DEFAULT_BUDGET_BYTES, DEFAULT_PACKING, ScoreStats, _is_oom, prefill_batch, resolve_packing, score_fused, \
    score_rows
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
           max_rows: int | None = None) -> Decision:
    """Decide every field of ``schema`` (a Pydantic model class, a schema dict / JSON, or a
    DecisionSchema) about ``context``. ``max_rows=1`` scores one row per forward (the parity reference)."""
    return decide_many(schema, [context], engine=engine, scoring=scoring, allow_none_of_above=allow_none_of_above,
                       abstain_below_margin=abstain_below_margin, packing=packing, budget_bytes=budget_bytes,
                       max_rows=max_rows)[0]


def decide_many(schema: Any, contexts: list[str], *, engine: Engine | None = None, scoring: str = DEFAULT_SCORING,
                allow_none_of_above: bool = False, abstain_below_margin: float | None = None,
                packing: str = DEFAULT_PACKING, budget_bytes: int = DEFAULT_BUDGET_BYTES,
                max_rows: int | None = None) -> list[Decision]:
    """One compiled plan shared by every context. Contexts are prefilled together in right-padded
    batches (each prompt once); each context's rows are then scored in batched passes on its prefix."""
    if isinstance(contexts, str) or not isinstance(contexts, (list, tuple)):
        raise TypedLMError("contexts must be a list of strings")
    _options(abstain_below_margin)
    t0 = time.perf_counter()
    engine = _engine(engine)
    plan = plan_for(schema, engine, scoring, allow_none_of_above)
    compile_s = time.perf_counter() - t0
    ids_all = [prompt_ids(engine, plan, c) for c in contexts]  # validate every context before any model work
    for ids in ids_all:
        need = len(ids) + max((len(r.ids) for r in plan.rows), default=0)
        if need > engine.max_context:
            raise TypedLMError(f"decision prompt + rows need {need} tokens; the model's context is {engine.max_context}")
    packing = resolve_packing(packing, engine)
    out: list[Decision] = []
    if packing == "fused" and max_rows is None:
        todo = []
        for i, ids in enumerate(ids_all):  # prompt + rows in one forward per context, where they fit
            st = ScoreStats()
            t0 = time.perf_counter()
            picked = score_fused(engine, plan, ids, budget_bytes=budget_bytes, stats=st)
            if picked is None:
                todo.append(i)
                out.append(None)
                continue
            engine.sync()
            out.append(_finish_one(engine, plan, ids, picked, time.perf_counter() - t0, 0.0, compile_s,
                                   abstain_below_margin, st))
            compile_s = 0.0
        rest = decide_many(plan.schema, [contexts[i] for i in todo], engine=engine,
                           scoring=scoring, allow_none_of_above=allow_none_of_above,
                           abstain_below_margin=abstain_below_margin, packing="packed",
                           budget_bytes=budget_bytes) if todo else []
        for i, d in zip(todo, rest):
            out[i] = d
        return out
    for group in _groups(ids_all):
        stats = [ScoreStats() for _ in group]
        t0 = time.perf_counter()
        caches = _prefill_group(engine, [ids_all[i] for i in group], stats[0])
        engine.sync()
        share = (time.perf_counter() - t0) / len(group)  # the shared batched prefill, split evenly
        for i, cache, st in zip(group, caches, stats):
            out.append(_score_one(engine, plan, ids_all[i], cache, share, compile_s, abstain_below_margin, packing,
                                  budget_bytes, max_rows, st))
            compile_s = 0.0
    return out


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


def _score_one(engine, plan, ids, cache, prefill_s, compile_s, abstain_below, packing, budget, max_rows,
               stats: ScoreStats) -> Decision:
    t1 = time.perf_counter()
    picked = score_rows(engine, plan, cache, len(ids), packing=packing, budget_bytes=budget, max_rows=max_rows,
                        stats=stats)
    engine.sync()
    return _finish_one(engine, plan, ids, picked, prefill_s, time.perf_counter() - t1, compile_s, abstain_below,
                       stats)


def _finish_one(engine, plan, ids, picked, prefill_s, scoring_s, compile_s, abstain_below,
                stats: ScoreStats) -> Decision:
    """Trie scores of every question -> the Decision (through the one finalizer). For ``fused`` the one
    forward (prompt + rows) is reported as ``prefill``."""
    t1 = time.perf_counter()
    scores = []
    for qi, q in enumerate(plan.questions):
        local, _full, log_mass = score_trie(q.trie, [picked[(qi, p)] for p in range(len(q.trie.points))])
        scores.append(QuestionScore(tuple(local), log_mass))
    scoring_s += time.perf_counter() - t1
    timings = {"compile": compile_s, "prefill": prefill_s, "scoring": scoring_s,
               "total": compile_s + prefill_s + scoring_s}
    usage = {"prompt_tokens": len(ids), **stats.as_dict()}
    return finish_decision(plan, scores, timings=timings, usage=usage, model=engine.name,
                           abstain_below_margin=abstain_below)


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


__all__ = ["NONE_OF_ABOVE", "decide", "decide_many", "naive_generate", "naive_json_schema", "plan_for"]
