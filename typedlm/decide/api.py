"""``decide`` / ``decide_many``: schema + contexts -> Decisions, as one pipeline of named steps.

    schema -> plan -> prompt              ``prepare``: every check before any model work (a ``Job``)
    -> score                              ``batches.score_prompts``: shared prefix once, rows batched;
                                          ``order="averaged"``: two views of the choices, averaged by name
    -> prior / calibration                each field's rule (``rules.final_scores``: prior mode, calibrator),
                                          near ties rescored one row at a time
    -> constraints                        ``joint.solve_fields``: the exact joint choice (multi rule too)
    -> result                             ``result.field_results``, ``result.finish_decision``

``run`` executes a prepared job. Fields with ``depends_on`` repeat score .. constraints per wave
(:mod:`typedlm.decide.constraints.depends`); every option is a :class:`~typedlm.decide.options.DecideOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass
import time
from typing import Any

from ..engine import Engine
from ..errors import TypedLMError
from ..generate.api import default_engine as load_default
from ..runner.prefix_cache import reused_by, tally
from .constraints.depends import given_text, waves as dependency_waves
from .constraints.joint import pins, solve_fields
from .options import DecideOptions
from .orders import Views, average, combined, view_plans
from .passes import DEFAULT_BUDGET_BYTES, resolve_packing
from .plan import DEFAULT_SCORING, NONE_OF_ABOVE, Plan, get_plan
from .prior import fingerprint, mean_log_probs, neutral as neutral_prior
from .prompt import PROMPT_VERSION, prompt_ids, prompt_record
from .result import Decision, field_results, finish_decision
from .rules import Rule, check_contexts, final_scores, prior_modes, rules_for
from .schema import DecisionSchema
from .scoring import Scored, merged_usage, question_score, score_prompts
from .ties import drift, near_ties, rescore_one_row


def default_engine(engine: Engine | None = None) -> Engine:
    if engine is not None:
        return engine

    return load_default()


def plan_for(schema: Any, engine: Engine, scoring: str = DEFAULT_SCORING, allow_none_of_above: bool = False) -> Plan:
    return get_plan(engine, DecisionSchema.coerce(schema), scoring, allow_none_of_above)


@dataclass(frozen=True)
class Job:
    """A checked request: the plan (and one per ``depends_on`` wave), options, wave-0 prompts."""
    engine: Engine
    plan: Plan
    options: DecideOptions
    contexts: tuple[str, ...]
    prompts: tuple[list[int], ...]
    waves: tuple[tuple[str, ...], ...]
    plans: tuple[Plan, ...]
    views: tuple[tuple[Plan, ...], ...]  # per wave: the plans scored (``orders.view_plans``; given: the wave's plan)
    view_prompts: tuple[tuple[list[int], ...], ...]  # [view][context] wave-0 prompt ids (view 0: ``prompts``)
    rules: dict[str, Rule]  # field -> its decision rule (the bundle's, else the options')


def decide(schema: Any, context: str, options: DecideOptions | None = None, *, engine: Engine | None = None,
           budget_bytes: int = DEFAULT_BUDGET_BYTES, max_rows: int | None = None, **overrides) -> Decision:
    """Decide every field of ``schema`` (a Pydantic model class, a schema dict / JSON, or a DecisionSchema)
    about ``context``. ``options`` and/or keyword overrides (``prior=``, ``calibration=``, ...:
    :class:`DecideOptions`). ``max_rows=1`` scores one row per forward (the parity reference)."""
    return decide_many(schema, [context], options, engine=engine, budget_bytes=budget_bytes, max_rows=max_rows,
                       **overrides)[0]


def decide_many(schema: Any, contexts: list[str], options: DecideOptions | None = None, *,
                engine: Engine | None = None, budget_bytes: int = DEFAULT_BUDGET_BYTES, max_rows: int | None = None,
                **overrides) -> list[Decision]:
    """One compiled plan shared by every context: the prompts' common prefix prefilled once, each context's
    rows scored in batched passes. ``prior="batch"`` estimates each question's prior from these contexts."""
    job = prepare(schema, contexts, options, engine=engine, **overrides)
    return run(job, budget_bytes=budget_bytes, max_rows=max_rows)


def prepare(schema: Any, contexts: list[str], options: DecideOptions | None = None, *, engine: Engine | None = None,
            **overrides) -> Job:
    """schema -> plan -> prompts, with every check that needs no forward pass: options, the calibration
    bundle against this model / prompt version / plan, each context (errors name ``contexts[i]``)."""
    if isinstance(contexts, str) or not isinstance(contexts, (list, tuple)):
        raise TypedLMError("contexts must be a list of strings")
    opts = DecideOptions.make(options, **overrides)
    engine = default_engine(engine)
    plan = plan_for(schema, engine, opts.scoring, opts.allow_none_of_above)
    if opts.calibration is not None:
        opts.calibration.check(model_hash=fingerprint(engine), prompt_version=PROMPT_VERSION, scoring=plan.scoring,
                               plan=plan, order=opts.order)
    rules = rules_for(plan, opts)
    check_contexts(rules, len(contexts))
    waves = dependency_waves(plan.schema)
    # wave 0 is the whole plan (its prompt and scores are those of a decision without dependencies; the
    # children's first-pass scores are then replaced); later waves score their fields on "Given:" prompts
    plans = [plan] + [get_plan(engine, plan.schema.subset(w), opts.scoring, opts.allow_none_of_above)
                      for w in waves[1:]]
    views = tuple(view_plans(engine, p, opts.order) for p in plans)
    prompts = tuple(tuple(_checked_prompts(engine, vp, contexts)) for vp in views[0])
    return Job(engine, plan, opts, tuple(contexts), prompts[0], tuple(waves), tuple(plans), views, prompts, rules)


def _checked_prompts(engine: Engine, plan: Plan, contexts) -> list[list[int]]:
    """Each context's prompt ids for ``plan``; a context too long for the model is refused, naming it."""
    longest = max((len(r.ids) for r in plan.rows), default=0)
    prompts = []
    for i, c in enumerate(contexts):
        try:
            ids = prompt_ids(engine, plan, c)
            if len(ids) + longest > engine.max_context:
                raise TypedLMError(f"decision prompt + rows need {len(ids) + longest} tokens; the model's context "
                                   f"is {engine.max_context}")
        except TypedLMError as e:
            raise TypedLMError(f"contexts[{i}]: {e}" if len(contexts) > 1 else str(e)) from e
        prompts.append(ids)
    return prompts


def run(job: Job, *, engine: Engine | None = None, budget_bytes: int = DEFAULT_BUDGET_BYTES,
        max_rows: int | None = None) -> list[Decision]:
    """The model work of a prepared job, step by step (module docstring). ``engine``: the job's own, or a
    handle of it whose runner runs the forwards elsewhere (beside streams: the scheduler's ``ScheduledRunner``)."""
    t0 = time.perf_counter()
    engine, plan, opts = engine or job.engine, job.plan, job.options
    packing = resolve_packing(opts.packing, engine, job.prompts)

    def score(p: Plan, ids: list[list[int]]) -> list[Scored]:
        return score_prompts(engine, p, ids, packing, budget_bytes, max_rows)

    modes = set(prior_modes(job.rules).values())
    neutral = average(plan, [(vp, neutral_prior(engine, vp, lambda ids, vp=vp: [s.scores for s in score(vp, ids)],
                                                PROMPT_VERSION)) for vp in job.views[0]]) \
        if "neutral" in modes else None
    compile_s = time.perf_counter() - t0
    n = len(job.contexts)
    final = [[None] * len(plan.questions) for _ in range(n)]
    runs: list[list[Scored]] = [[] for _ in range(n)]
    records: list[dict] = [{} for _ in range(n)]
    values: list[dict] = [{} for _ in range(n)]
    fixed: list[dict] = [{} for _ in range(n)]  # constrained fields of earlier waves: the solver keeps them
    index = {(q.field, q.kind, q.option): i for i, q in enumerate(plan.questions)}
    for k, (wave, wplan) in enumerate(zip(job.waves, job.plans)):
        ids_v = [list(p) for p in job.view_prompts] if k == 0 else \
            [[prompt_ids(engine, vp, c, given_text(plan.schema, values[i], wave)) for i, c in enumerate(job.contexts)]
             for vp in job.views[k]]
        with tally() as seen:  # the prefix cache's lookups: tokens each prompt read from it
            views = Views(job.views[k], ids_v, [score(vp, ids) for vp, ids in zip(job.views[k], ids_v)])  # score
        scored = [combined(wplan, views, i) for i in range(n)]
        if k == 0:
            cached = [sum(reused_by(ids[i], seen) for ids in ids_v) for i in range(n)]
        where = [index[(q.field, q.kind, q.option)] for q in wplan.questions]
        logs = {"neutral": [neutral[j] for j in where] if neutral is not None else None,
                "batch": mean_log_probs([s.scores for s in scored]) if "batch" in modes else None}
        for i, s in enumerate(scored):
            sc, ties = _prior_and_calibration(job, engine, wplan, wave if k == 0 else (), views, i, s, logs, max_rows)
            for j, qs in zip(where, sc):
                final[i][j] = qs
            runs[i].append(s)
            for name in (wave if k else plan.schema.names):
                records[i][name] = _record(job, name, k, ties, values[i])
            if k + 1 < len(job.waves):  # decide this wave (constraints over the whole plan, later waves'
                # first-pass scores standing in) before the next wave's "Given:" line conditions on it
                chosen, got = _constraints_and_result(job, final[i], fixed[i], records[i])
                values[i].update({name: got[name].value for name in wave})
                fixed[i].update(pins(plan, chosen, wave))
    out, record = [], prompt_record(plan)
    for i in range(n):
        _chosen, fields = _constraints_and_result(job, final[i], fixed[i], records[i])
        prefill_s, scoring_s = sum(r.prefill_s for r in runs[i]), sum(r.scoring_s for r in runs[i])
        timings = {"compile": compile_s, "prefill": prefill_s, "scoring": scoring_s,
                   "total": compile_s + prefill_s + scoring_s}
        usage = {"prompt_tokens": sum(len(ids[i]) for ids in job.view_prompts), "cached_prompt_tokens": cached[i],
                 **merged_usage([r.stats.as_dict() for r in runs[i]])}
        out.append(finish_decision(plan, fields, timings=timings, usage=usage, model=engine.name, prompt=record))
        compile_s = 0.0
    return out


def _prior_and_calibration(job: Job, engine: Engine, wplan: Plan, tie_fields, views: Views, i: int, s: Scored,
                           logs, max_rows):
    """Context ``i``'s scores of one wave under each field's rule (prior, then calibrator); near ties among
    ``tie_fields`` (the batch shape could pick these winners) rescored one row per forward first, in every view."""
    rules = job.rules
    sc = final_scores(wplan, s.scores, rules, logs)
    ties = near_ties(wplan, sc, tie_fields, drift(engine)) if tie_fields and max_rows != 1 else []
    if ties:
        again = []
        for vp, ids, (_, old) in zip(views.plans, views.ids, views.context_views(i)):
            picked = rescore_one_row(engine, vp, ids[i], ties, s.stats)
            again.append((vp, [question_score(q, qi, picked) if q.field in ties else o
                               for qi, (q, o) in enumerate(zip(vp.questions, old))]))
        sc = final_scores(wplan, average(wplan, again), rules, logs)
    return sc, ties


def _record(job: Job, name: str, wave: int, ties, values: dict) -> dict:
    bundle = job.options.calibration
    source = "dependency" if wave else "rescored_one_row" if name in ties else "batched"
    rec = {"score_source": source, "prior": job.rules[name].prior,
           **(bundle.record(name) if bundle is not None else {})}
    if wave:
        rec["given"] = {p: values[p] for p in job.plan.schema[name].depends_on}
    return rec


def _constraints_and_result(job: Job, scores: list, fixed: dict, records: dict):
    return settle(job.plan, scores, job.options, fixed=fixed, records=records, rules=job.rules)


def settle(plan: Plan, scores: list, options: DecideOptions, *, fixed: dict | None = None,
           records: dict | None = None, rules: dict[str, Rule] | None = None):
    """The constraint step (each multi field's threshold and set rule), then the field results: (chosen keys,
    fields). ``scores`` are final (prior and calibration applied)."""
    chosen, free = solve_fields(plan, scores, rules or rules_for(plan, options), fixed=fixed)
    return chosen, field_results(plan, scores, chosen, free, abstain_below_margin=options.abstain_below_margin,
                                 records=records)


__all__ = ["NONE_OF_ABOVE", "Job", "decide", "decide_many", "plan_for", "prepare", "run", "settle"]
