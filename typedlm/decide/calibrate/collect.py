"""Scores of labelled cases, prior / calibration variants computed from them, and bundle fitting.

The model runs once per case (``decide_many``, ``prior="none"``) and every question's constrained
log-scores are kept (:func:`collect`, written to ``scores.jsonl``). Every variant is then computed from
those scores through the same functions ``decide`` uses — :func:`typedlm.decide.prior.correct`,
:meth:`CalibrationBundle.apply` and the one finalizer :func:`finish_decision` — so a variant's decisions
are exactly what ``decide(..., prior=, calibration=)`` returns on those cases, without re-running the
model (``tests/decide/test_fitting.py`` checks this against ``decide_many``).

Variants: any :class:`DecideOptions` (prior ``none`` / ``neutral`` / ``batch``: the prior of each batch of
``BATCH`` consecutive cases, as a ``decide_many`` call of that size would compute it; a set rule; a bundle of
per-field rules fitted on the calibration split by :func:`fit_bundle`), through
:mod:`typedlm.decide.rules` as ``decide`` applies them.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...engine import Engine
from ...errors import TypedLMError
from ...grammar.spec import canonical_json
from .. import prior as P
from .. import rules as R
from ..api import decide_many, plan_for, settle
from ..cardinality import SET_RULES
from ..logmath import log_softmax
from ..options import DecideOptions
from ..orders import DEFAULT_ORDER, average, view_plans
from ..plan import Plan
from ..prompt import PROMPT_VERSION, prompt_hash, prompt_record
from ..result import Decision, QuestionScore, finish_decision
from ..scoring import score_prompts
from .bundle import SCALAR_KINDS, CalibrationBundle
from .fit import FOLDS, Example, evaluate
from .rulefit import PRIORS, choose_rules

BATCH = 32  # contexts per decide_many call for prior="batch" in measurements
CHUNK = 8  # contexts per decide_many call while collecting


@dataclass
class Case:
    id: str
    split: str
    gold: dict
    scores: list[QuestionScore]  # every question of the plan, prior "none"
    latency_s: float


def question_scores(plan: Plan, d: Decision) -> list[QuestionScore]:
    """Every question's log-scores back from a Decision made without prior or calibration."""
    out = []
    for q in plan.questions:
        r = d.fields[q.field]
        if q.kind == "scalar":
            logs = tuple(r.log_scores[k] for k in q.keys)
        elif q.kind == "option":
            ly = r.log_scores[q.option]
            logs = (ly, math.log(max(-math.expm1(ly), 1e-300)))
        else:
            logs = tuple(math.log(max(r.count_probabilities[k], 1e-300)) for k in q.keys)
        out.append(QuestionScore(logs, 0.0))
    return out


def from_predictions(plan: Plan, path: Path, ids: set[str]) -> list[Case]:
    """Cases scored by an eval run (``typedlm eval``, track parallel, the plan's scoring mode, unpermuted
    lines, prior none) with the prompt this code renders (the run's recorded prompt hash): the same scores,
    so they need not be scored again. Scalar fields only (eval lines carry no count question)."""
    if any(q.kind != "scalar" for q in plan.questions) or not _same_prompt(plan, path.parent / "run.json"):
        return []
    by_case: dict[str, dict] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:  # a line still being written by a running eval
            continue
        if d["track"] == "parallel" and d["mode"] == plan.scoring and d["permutation"] is None \
                and d["case_id"] in ids and d["scores"] and not d.get("error") \
                and (d.get("record") or {}).get("prior", "none") == "none":  # raw scores only
            by_case.setdefault(d["case_id"], {})[d["field"]] = d
    out = []
    for cid, lines in by_case.items():
        if set(lines) != set(plan.schema.names):
            continue
        first = next(iter(lines.values()))
        scores = [QuestionScore(tuple(lines[q.field]["scores"][k] for k in q.keys), 0.0) for q in plan.questions]
        out.append(Case(cid, first["split"], {f: ln["gold"] for f, ln in lines.items()}, scores,
                        first["case_latency_s"]))
    return out


def _same_prompt(plan: Plan, run_json: Path) -> bool:
    try:
        recorded = json.loads(run_json.read_text())["prompts"][f"parallel/{plan.scoring}"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return recorded == prompt_hash(plan)


def collect(engine: Engine, schema: Any, cases: list, path: Path | None = None, progress=None,
            reuse: Path | None = None, order: str = DEFAULT_ORDER) -> list[Case]:
    """Score ``cases`` (eval Cases) with ``decide_many`` in chunks; resumable through ``path`` (JSONL, each
    line stamped with the prompt version: lines of another version are scored again); cases an eval run
    already scored with this prompt (``reuse``: its predictions.jsonl) are taken from it.

    ``order="averaged"``: each view of :func:`typedlm.decide.orders.view_plans` is collected on its own (a view
    whose schema is the given one into ``path``, the others into ``<path>-canonical`` / ``<path>-mirror``), then
    every case's scores are averaged by :func:`typedlm.decide.orders.average`, as ``decide`` averages them."""
    plan = plan_for(schema, engine)
    if order == "given":
        return _collect_plan(engine, plan, cases, path, progress, reuse)
    views = view_plans(engine, plan, order)
    parts = [_collect_plan(engine, vp, cases, _view_path(path, plan, vp, name), progress,
                           reuse if vp.schema.key == plan.schema.key else None)
             for vp, name in zip(views, ("canonical", "mirror"))]
    return [replace(cs[0], scores=average(plan, [(vp, c.scores) for vp, c in zip(views, cs)]),
                    latency_s=sum(c.latency_s for c in cs)) for cs in zip(*parts)]


def _view_path(path: Path | None, plan: Plan, view: Plan, name: str) -> Path | None:
    if path is None or view.schema.key == plan.schema.key:
        return path
    return path.with_name(f"{path.stem}-{name}{path.suffix}")


def _collect_plan(engine: Engine, plan: Plan, cases: list, path: Path | None, progress,
                  reuse: Path | None) -> list[Case]:
    done: dict[str, Case] = {}
    if path is not None and path.exists():
        for line in path.read_text().splitlines():
            d = json.loads(line)
            if d.get("prompt_version") != PROMPT_VERSION:
                continue
            done[d["id"]] = Case(d["id"], d["split"], d["gold"], [QuestionScore(tuple(s), 0.0) for s in d["scores"]],
                                 d["latency_s"])
    if reuse is not None and reuse.exists():
        got = [c for c in from_predictions(plan, reuse, {c.id for c in cases}) if c.id not in done]
        for c in got:
            done[c.id] = c
        if path is not None and got:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("".join(json.dumps({"id": c.id, "split": c.split, "gold": c.gold,
                                             "prompt_version": PROMPT_VERSION, "source": str(reuse),
                                             "scores": [list(s.log_scores) for s in c.scores],
                                             "latency_s": c.latency_s}) + "\n" for c in got))
    todo = [c for c in cases if c.id not in done]
    for i in range(0, len(todo), CHUNK):
        part = todo[i:i + CHUNK]
        t0 = time.perf_counter()
        ds = decide_many(plan.schema, [c.context for c in part], engine=engine, prior="none")
        dt = (time.perf_counter() - t0) / len(part)
        lines = []
        for c, d in zip(part, ds):
            got = Case(c.id, c.split, c.labels, question_scores(plan, d), dt)
            done[c.id] = got
            lines.append(json.dumps({"id": got.id, "split": got.split, "gold": got.gold,
                                     "prompt_version": PROMPT_VERSION,
                                     "scores": [list(s.log_scores) for s in got.scores], "latency_s": dt}))
        if path is not None:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("".join(x + "\n" for x in lines))
        if progress:
            progress(len(part))
    return [done[c.id] for c in cases]


def neutral_logs(engine: Engine, plan: Plan, order: str = DEFAULT_ORDER) -> list[tuple[float, ...]]:
    """The neutral prior of ``plan`` as ``decide`` computes it under ``order`` (averaged over the views)."""
    return average(plan, [(vp, P.neutral(engine, vp, lambda ids, vp=vp: [
        s.scores for s in score_prompts(engine, vp, ids, "packed", 1 << 30, None)], PROMPT_VERSION))
        for vp in view_plans(engine, plan, order)])


def corrected(plan: Plan, cases: list[Case], prior: str, neutral: list | None,
              batch: int = BATCH) -> list[list[QuestionScore]]:
    """Each case's question scores after the prior step ``prior`` (batch: per BATCH-sized chunk)."""
    if prior != "batch":
        return [P.adjust(plan, c.scores, prior, neutral) for c in cases]
    out = []
    for i in range(0, len(cases), batch):
        part = [c.scores for c in cases[i:i + batch]]
        logs = P.mean_log_probs(part)
        out += [P.adjust(plan, s, prior, logs) for s in part]
    return out


def examples(plan: Plan, cases: list[Case], scores: list[list[QuestionScore]]) -> list[Example]:
    """Calibration examples (per field: choice -> log-score, multi: option -> log P(yes)) with gold."""
    out = []
    for c, sc in zip(cases, scores):
        fields: dict = {}
        counts: dict = {}
        for q, s in zip(plan.questions, sc):
            if q.kind == "scalar":
                fields[q.field] = dict(zip(q.keys, s.log_scores))
            elif q.kind == "option":
                fields.setdefault(q.field, {})[q.option] = s.log_scores[0]
            else:
                counts[q.field] = list(log_softmax(s.log_scores))
        out.append(Example(scores=fields, gold={k: c.gold.get(k) for k in fields}, counts=counts))
    return out


def final(plan: Plan, cases: list[Case], rules: dict, neutral: list | None,
          batch: int = BATCH) -> list[list[QuestionScore]]:
    """Each case's final question scores under ``rules`` (:func:`typedlm.decide.rules.final_scores`: per-field
    prior, then calibrator); a batch prior per BATCH-sized chunk, as a ``decide_many`` call of that size."""
    out = []
    for a, b in P.batch_chunks(len(cases), batch, "batch"):
        part = [c.scores for c in cases[a:b]]
        logs = {"neutral": neutral, "batch": P.mean_log_probs(part) if len(part) >= P.MIN_BATCH else None}
        out += [R.final_scores(plan, s, rules, logs) for s in part]
    return out


def fit_bundle(engine: Engine, plan: Plan, fit_cases: list[Case], neutral: list | None, *, data: str = "",
               priors=PRIORS, kinds=SCALAR_KINDS, set_rules=SET_RULES, batch: int = BATCH,
               progress=None, order: str = DEFAULT_ORDER) -> tuple[CalibrationBundle, dict]:
    """A bundle of per-field rules chosen by cross-validation on ``fit_cases`` (the calibration split:
    :mod:`typedlm.decide.calibrate.rulefit`) and its report: cross-validated ECE of each field's chosen rule against the
    uncalibrated default, the choice and every candidate's row."""
    types = {f.name: f.type for f in plan.schema.fields}
    sizes = {f.name: len(f.values) for f in plan.schema.fields}
    by_prior = {p: examples(plan, fit_cases, corrected(plan, fit_cases, p, neutral, batch)) for p in priors}
    fields, records = choose_rules(types, sizes, by_prior, kinds=kinds, set_rules=set_rules, progress=progress)
    chosen = {n: r["chosen"] for n, r in records.items()}
    report = {"n_fit": len(fit_cases), "rules": chosen, "candidates": {n: r["candidates"] for n, r in records.items()}}
    bundle = CalibrationBundle(model=engine.name, model_hash=P.fingerprint(engine), prompt_version=PROMPT_VERSION,
                               scoring=plan.scoring, order=order, fields=fields,
                               fit={"data": data, "n_fit": len(fit_cases), "split": "calibration",
                                    "folds": FOLDS, "rules": chosen})
    return bundle, report


def heldout(plan: Plan, bundle: CalibrationBundle, cases: list[Case], neutral: list | None,
            batch: int = BATCH) -> dict:
    """ECE on ``cases`` of each field under its bundle prior without ("before") and with ("after") its calibrator
    (benches that hold out a test split; ``typedlm calibrate`` does not call it)."""
    types = {f.name: f.type for f in plan.schema.fields}
    rules = R.rules_for(plan, DecideOptions(scoring=plan.scoring, calibration=bundle))
    plain = {n: replace(r, calibration=None) for n, r in rules.items()}
    ex = examples(plan, cases, final(plan, cases, plain, neutral, batch))
    return {"before": evaluate(ex, types, None), "after": evaluate(ex, types, bundle.fields)}


def decisions(plan: Plan, cases: list[Case], engine_name: str, options: DecideOptions, neutral: list | None,
              batch: int = BATCH) -> list[Decision]:
    """The decisions ``decide`` would return on these cases' stored raw scores under ``options`` (its bundle's
    rules or the defaults), through the one rule path and the one finalizer."""
    out, record = [], prompt_record(plan)
    rules = R.rules_for(plan, options)
    bundle = options.calibration
    for c, sc in zip(cases, final(plan, cases, rules, neutral, batch)):
        rec = {f.name: {"prior": rules[f.name].prior, **(bundle.record(f.name) if bundle else {})}
               for f in plan.schema.fields}
        _chosen, fields = settle(plan, sc, options, records=rec, rules=rules)
        out.append(finish_decision(plan, fields, timings={"total": c.latency_s}, usage={}, model=engine_name,
                                   prompt=record))
    return out


def calibrate(engine: Engine, fit_cases: list, *, data: str = "", scores: Path | None = None, priors=PRIORS,
              kinds=SCALAR_KINDS, set_rules=SET_RULES, on_case=None, on_field=None,
              order: str = DEFAULT_ORDER) -> tuple[CalibrationBundle, dict]:
    """``typedlm calibrate``: score ``fit_cases`` (eval Cases of the calibration split, one schema; resumable
    through ``scores``), then choose every field's rule by cross-validation on them alone. ``on_case(n)`` after
    each scored chunk, ``on_field(name)`` after each field's choice. The report adds the seconds spent."""
    if len({canonical_json(c.schema) for c in fit_cases}) != 1:
        raise TypedLMError(f"{data}: calibration needs one schema for every case")
    t0 = time.perf_counter()
    plan = plan_for(fit_cases[0].schema, engine)
    scored = collect(engine, plan.schema, fit_cases, scores, progress=on_case, order=order)
    neutral = neutral_logs(engine, plan, order) if "neutral" in priors else None
    t1 = time.perf_counter()
    bundle, report = fit_bundle(engine, plan, scored, neutral, data=data, priors=priors, kinds=kinds,
                                set_rules=set_rules, progress=on_field, order=order)
    t2 = time.perf_counter()
    report["seconds"] = {"scoring": t1 - t0, "fitting": t2 - t1, "total": t2 - t0}
    return bundle, report
