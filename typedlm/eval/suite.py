"""``typedlm eval --suite``: every bundled dataset four ways — majority, naive_local, parallel with default
settings, parallel with a bundle fitted on the calibration split — and one table.

Per dataset (files under ``out``, all resumable):

- ``scores/<dataset>.jsonl``: raw (prior ``none``) scores of the calibration and test cases
  (:func:`typedlm.decide.calibrate.collect.collect`; with ``order="averaged"`` also ``<dataset>-mirror.jsonl``,
  the other view, and both variants use the averaged scores); every parallel variant is computed from them through decide's own
  rule path (:func:`typedlm.decide.calibrate.collect.decisions`), so a variant's answers are what ``decide`` returns;
- ``bundles/<dataset>.json``: the rules chosen by cross-validation on the calibration split only
  (:func:`typedlm.decide.calibrate.collect.fit_bundle`, as ``typedlm calibrate``);
- ``scores/<dataset>-permuted.jsonl``: the first ``flip_limit`` test cases scored with every field's choices
  permuted (:func:`typedlm.eval.tracks.permuted_schema`), with that plan's neutral prior: the flip rate of
  both parallel variants (the bundle applied by candidate name);
- ``naive/<dataset>.jsonl``: naive_local prediction lines on the first ``naive_limit`` test cases;
- ``<dataset>/predictions.jsonl`` + ``run.json``: an eval run folder (``typedlm report`` reads it).

``suite.json`` and ``table.md`` (:mod:`typedlm.eval.suite_table`) hold every field's accuracy with its 95 %
bootstrap interval, the majority baseline, ECE without / with the bundle, flip rates and set sizes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from ..decide.calibrate import collect as fitting
from ..decide.api import decide_many, plan_for
from ..decide.options import DecideOptions
from ..decide.orders import DEFAULT_ORDER
from ..decide.prompt import PROMPT_VERSION
from ..decide.result import QuestionScore
from ..errors import TypedLMError
from .cases import Case, check_case, select
from .datasets import DATASETS, load
from .metrics import groups_from_lines, summarize
from .runner import case_lines, prediction_line, read_jsonl
from .suite_table import write_table
from .tracks import NaiveTrack, choice_keys, decision_answers, permuted_schema

MODES = ("default", "calibrated")


def _lines(plan, cases: list[Case], scored: list, name: str, mode: str, opts, neutral, engine_name: str,
           permutation: dict | None = None) -> list[dict]:
    """Prediction lines of one parallel variant (``mode``) from stored scores."""
    out = []
    by_id = {c.id: c for c in cases}
    for c, d in zip(scored, fitting.decisions(plan, scored, engine_name, opts, neutral)):
        case = by_id[c.id]
        schema, gold = check_case(case)
        for a in decision_answers(plan.schema, d, c.latency_s):
            if permutation is not None and a.field not in permutation:
                continue  # a boolean: nothing was permuted
            a.choices = choice_keys(schema[a.field])  # the case's schema order; ``permutation``: the shown one
            if a.field_type == "multi" and a.pred is not None:
                a.pred = [o for o in a.choices if o in a.pred]
            out.append(prediction_line(run_id=f"suite-{name}", track="parallel", mode=mode, case=case, dataset=name,
                                       gold=gold, answer=a, case_latency_s=c.latency_s,
                                       permutation=permutation.get(a.field) if permutation is not None else None))
    return out


def _permuted(engine, cases: list[Case], path: Path, progress, order: str) -> list[tuple[Case, dict, object, list, list]]:
    """(case, shown order, plan, [scored case], neutral logs) per case with choices permuted; resumable."""
    done = {d["id"]: d for d in read_jsonl(path) if d.get("prompt_version") == PROMPT_VERSION}
    out = []
    for case in cases:
        schema, shown = permuted_schema(case.schema, case.id)
        plan = plan_for(schema, engine)
        if case.id not in done:
            t0 = time.perf_counter()
            d = decide_many(plan.schema, [case.context], engine=engine, prior="none", order=order)[0]
            row = {"id": case.id, "prompt_version": PROMPT_VERSION, "latency_s": time.perf_counter() - t0,
                   "scores": [list(s.log_scores) for s in fitting.question_scores(plan, d)],
                   "neutral": [list(x) for x in fitting.neutral_logs(engine, plan, order)]}
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            done[case.id] = row
            if progress:
                progress(1)
        row = done[case.id]
        scored = fitting.Case(case.id, case.split, case.labels, [QuestionScore(tuple(s), 0.0) for s in row["scores"]],
                              row["latency_s"])
        out.append((case, shown, plan, [scored], [tuple(x) for x in row["neutral"]]))
    return out


def _naive(engine, name: str, cases: list[Case], path: Path, progress) -> list[dict]:
    """naive_local lines for ``cases`` (resumable ``path``: lines of cases already answered are kept)."""
    have = {ln["case_id"] for ln in read_jsonl(path)}
    track = NaiveTrack(engine)
    manifest = {"run_id": f"suite-{name}", "dataset": name, "flip": False}
    for case in cases:
        if case.id in have:
            continue
        lines = case_lines(case, [track], manifest)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(ln, ensure_ascii=False) + "\n" for ln in lines))
        if progress:
            progress(1)
    ids = {c.id for c in cases}
    return [ln for ln in read_jsonl(path) if ln["case_id"] in ids and ln["permutation"] is None]


def run_dataset(engine, name: str, out: Path, *, cal_limit: int | None, test_limit: int | None,
                flip_limit: int, naive_limit: int, n_boot: int, progress: Callable | None = None,
                order: str = DEFAULT_ORDER) -> dict:
    """One dataset of the suite: its run folder and its rows (see the module docstring)."""
    cases_all = load(name)
    cal, test = select(cases_all, "calibration", cal_limit), select(cases_all, "test", test_limit)
    for sub in ("scores", "bundles", "naive", name):
        (out / sub).mkdir(parents=True, exist_ok=True)
    plan = plan_for(cal[0].schema, engine)
    step = (lambda what: (lambda k: progress(name, what, k))) if progress else (lambda what: None)
    scored = fitting.collect(engine, plan.schema, cal + test, out / "scores" / f"{name}.jsonl", progress=step("score"),
                             order=order)
    cal_s, test_s = scored[:len(cal)], scored[len(cal):]
    neutral = fitting.neutral_logs(engine, plan, order)
    bundle, rep = fitting.fit_bundle(engine, plan, cal_s, neutral, data=name, order=order)
    (out / "bundles" / f"{name}.json").write_text(bundle.model_dump_json(indent=2) + "\n")
    variants = {"default": DecideOptions(order=order), "calibrated": DecideOptions(order=order, calibration=bundle)}
    lines = []
    for mode, opts in variants.items():
        lines += _lines(plan, test, test_s, name, mode, opts, neutral, engine.name)
    permuted = out / "scores" / (f"{name}-permuted.jsonl" if order == "given" else f"{name}-permuted-{order}.jsonl")
    for case, shown, pplan, sc, pneutral in _permuted(engine, test[:flip_limit], permuted, step("flip"), order):
        for mode, opts in variants.items():
            lines += _lines(pplan, [case], sc, name, mode, opts, pneutral, engine.name, permutation=shown)
    lines += _naive(engine, name, test[:naive_limit], out / "naive" / f"{name}.jsonl", step("naive"))
    folder = out / name
    (folder / "predictions.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    (folder / "run.json").write_text(json.dumps({"run_id": f"suite-{name}", "dataset": name, "split": "test",
                                                 "status": "done", "cases": len(test), "model": engine.name,
                                                 "bundle": bundle.id, "order": order}, indent=2) + "\n")
    groups = groups_from_lines(lines)
    metrics = {"/".join(k): summarize(g, n_boot=n_boot) for k, g in groups.items()}
    return {"dataset": name, "n_calibration": len(cal), "n_test": len(test),
            "n_test_split": len(select(cases_all, "test", None)), "n_flip": min(flip_limit, len(test)),
            "n_naive": min(naive_limit, len(test)), "bundle": bundle.id, "rules": rep["rules"], "order": order,
            "fields": [f.name for f in plan.schema.fields], "metrics": metrics}


def run_suite(engine, out: Path, *, datasets=DATASETS, cal_limit: int | None = None, test_limit: int | None = None,
              flip_limit: int = 50, naive_limit: int = 100, n_boot: int = 1000, progress: Callable | None = None,
              command: str = "", machine: str = "", order: str = DEFAULT_ORDER) -> dict:
    """Each of ``datasets`` (:func:`run_dataset`), then ``suite.json`` and ``table.md`` in ``out``. Datasets of an
    earlier call into the same ``out`` stay in the table (each row keeps the command and limits that made it)."""
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown or not datasets:
        raise TypedLMError(f"--datasets: unknown {unknown or 'none given'}; use a comma list of {', '.join(DATASETS)}")
    out.mkdir(parents=True, exist_ok=True)
    limits = {"calibration": cal_limit, "test": test_limit, "flip": flip_limit, "naive": naive_limit, "order": order}
    t0 = time.time()
    results = {}
    for d in datasets:
        r = run_dataset(engine, d, out, cal_limit=cal_limit, test_limit=test_limit, flip_limit=flip_limit,
                        naive_limit=naive_limit, n_boot=n_boot, progress=progress, order=order)
        results[d] = {**r, "command": command, "machine": machine, "limits": limits, "seconds": time.time() - t0}
        t0 = time.time()
    old = out / "suite.json"
    earlier = json.loads(old.read_text())["datasets"] if old.exists() else []
    merged = {r["dataset"]: r for r in earlier if r.get("model") == engine.name}
    merged.update({d: {**r, "model": engine.name} for d, r in results.items()})
    summary = {"model": engine.name, "prompt_version": PROMPT_VERSION,
               "datasets": [merged[d] for d in DATASETS if d in merged]}
    (out / "suite.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_table(summary, out / "table.md")
    return summary
