"""``typedlm bench trust``: raw vs neutral prior vs batch prior vs calibrated, side by side, per dataset.

For each dataset the default model scores the calibration and test cases once (``prior="none"``;
:func:`typedlm.decide.calibrate.collect.collect`, resumable ``scores.jsonl``). Every variant is computed from those
scores through decide's own functions, written as an eval run folder (track ``parallel``, one *mode* per
variant: ``labels``, ``labels+neutral``, ``labels+batch``, each also ``+cal``, and for multi-label data
``labels+constrained``: the same scores under ``min_selected``/``max_selected``), and reported by the eval
harness (``typedlm report``: metrics with bootstrap intervals, reliability diagrams). Each ``+cal`` bundle's
calibrator kind is chosen by cross-validated NLL on the calibration split (:mod:`typedlm.decide.calibrate.fit`).
Beside the harness's ECE the summary gives each variant's NLL (scalar fields) and its *ECE floor*
(:func:`typedlm.decide.calibrate.bundle.ece_floor`: the ECE a perfectly calibrated predictor with the same
confidences would show on as many cases).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
import platform
import sys
import time

from ..decide.constraints import parse as constraints
from ..decide.calibrate import collect as fitting
from ..decide.api import plan_for
from ..decide.options import DecideOptions
from ..decide.calibrate.bundle import ece_floor
from ..decide.schema import DecisionSchema
from ..eval.cases import check_case, gold_key, select
from ..eval.runner import prediction_line
from ..eval.tracks import decision_answers



VARIANTS = ("none", "neutral", "batch")


def run_dataset(engine, name: str, cases_all: list, out: Path, fit_n: int, test_n: int, batch: int,
                reuse: Path | None = None) -> dict:
    fit_cases, test_cases = select(cases_all, "calibration", fit_n), select(cases_all, "test", test_n)
    schema = fit_cases[0].schema
    plan = plan_for(schema, engine)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    scored = fitting.collect(engine, plan.schema, fit_cases + test_cases, out / "scores.jsonl", reuse=reuse)
    fit_s, test_s = scored[:len(fit_cases)], scored[len(fit_cases):]
    neutral = fitting.neutral_logs(engine, plan)
    by_id = {c.id: c for c in test_cases}
    lines, summary = [], {"dataset": name, "n_fit": len(fit_s), "n_test": len(test_s), "batch": batch,
                          "variants": {}}
    variants: list[tuple[str, object, object]] = []
    for prior in VARIANTS:
        bundle, rep = fitting.fit_bundle(engine, plan, fit_s, neutral, data=name, batch=batch, priors=(prior,))
        held = fitting.heldout(plan, bundle, test_s, neutral, batch)
        (out / f"bundle-{prior}.json").write_text(bundle.model_dump_json(indent=2) + "\n")
        mode = "labels" + ("" if prior == "none" else f"+{prior}")
        variants.append((mode, plan, DecideOptions(prior=prior)))
        variants.append((mode + "+cal", plan, DecideOptions(prior=prior, calibration=bundle)))
        summary["variants"][mode] = {"heldout_ece_before": held["before"]["ece"],
                                     "heldout_ece_after": held["after"]["ece"], "bundle": bundle.id,
                                     "kinds": {k: v.kind for k, v in bundle.fields.items()},
                                     "candidates": rep["candidates"],
                                     "params": {k: v.model_dump(exclude_none=True) for k, v in bundle.fields.items()}}
    multi = [f for f in plan.schema.fields if f.type == "multi"]
    if multi:  # the constrained variant: the gold sets have 1-3 topics
        spec = plan.schema.to_dict()
        for f in multi:
            spec["fields"][f.name].update(min_selected=1, max_selected=3)
        cplan = plan_for(DecisionSchema.from_dict(spec), engine)
        variants.append(("labels+constrained", cplan, DecideOptions(prior="none")))
        summary["constraints"] = {f.name: {"min_selected": 1, "max_selected": 3} for f in multi}
    for mode, vplan, opts in variants:
        ds = fitting.decisions(vplan, test_s, engine.name, opts, neutral, batch)
        summary["variants"].setdefault(mode, {}).update(_quality(vplan.schema, ds, [by_id[c.id] for c in test_s]))
        viol = changed = 0
        for c, d in zip(test_s, ds):
            case = by_id[c.id]
            for a in decision_answers(vplan.schema, d, c.latency_s):
                lines.append(prediction_line(run_id=f"trust-{name}", track="parallel", mode=mode, case=case,
                                             dataset=name, gold=check_case(case)[1], answer=a, case_latency_s=c.latency_s,
                                             permutation=None))
            for f in multi:
                n = len(d.fields[f.name].value or [])
                viol += not (1 <= n <= 3)
                changed += d.fields[f.name].constraint_changed
        if multi:
            summary["variants"].setdefault(mode, {}).update(
                {"cases_outside_1_3_topics": viol, "constraint_changed": changed})
    (out / "predictions.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    meta = {"run_id": f"trust-{name}", "dataset": name, "split": "test", "status": "finished", "cases": len(test_s),
            "cases_finished": len(test_s), "model": engine.name, "model_sha256": None,
            "provenance": {"command": " ".join(["typedlm"] + sys.argv[1:]), "python": platform.python_version(),
                           "machine": platform.machine()},
            "trust": summary}
    (out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    summary["seconds"] = time.time() - t0
    return summary


def _quality(schema, ds: list, cases: list) -> dict:
    """NLL of the gold labels (scalar fields, mean over cases and fields) and the ECE floor of the confidences
    the harness bins (scalar: top-1; multi: each option's yes/no)."""
    nll, conf = [], []
    for d, case in zip(ds, cases):
        for f in schema.fields:
            r = d.fields[f.name]
            if f.type == "multi":
                conf += [max(p, 1 - p) for p in r.probabilities.values()]
            else:
                conf.append(max(r.probabilities.values()))
                nll.append(-math.log(max(r.probabilities[gold_key(f, case.labels[f.name])], 1e-300)))
    return {"nll": sum(nll) / len(nll) if nll else None, "ece_floor": ece_floor(conf)}


def _limits(spec: str, names: list[str], opt: str) -> dict[str, int]:
    """"N" (every dataset) or "name=N,..." (each dataset named) -> {dataset: N}."""
    try:
        if "=" not in spec:
            out = {n: int(spec) for n in names}
        else:
            out = {k.strip(): int(v) for k, v in (p.split("=", 1) for p in spec.split(",") if p.strip())}
    except ValueError:
        raise ValueError(f"{opt} must be N or dataset=N,...; got {spec!r}")
    missing = [n for n in names if n not in out]
    if missing or any(v < 2 for v in out.values()):
        raise ValueError(f"{opt}: give every dataset ({', '.join(names)}) at least 2 cases; got {spec!r}")
    return out


def summary_table(sums: list[dict], report: dict) -> str:
    """One markdown table: per dataset and variant, test metrics (95 % intervals in report.md) and the
    held-out ECE of the bundle fitted for that prior mode."""
    rows = {(r["dataset"], r["mode"]): r["metrics"] for r in report["rows"]}
    lines = ["| dataset | variant | n test | n fit | accuracy | macro-F1 | ECE [95 % CI] | ECE floor | NLL | "
             "Δ macro-F1 vs raw | note |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for s in sums:
        base = rows[(s["dataset"], "labels")]["macro_f1"]["value"]
        for mode, v in s["variants"].items():
            m = rows.get((s["dataset"], mode))
            if m is None:
                continue
            note = []
            if "kinds" in v:
                note.append("+cal kind: " + ", ".join(f"{k} {kind}" for k, kind in v["kinds"].items()))
            if "heldout_ece_before" in v:
                worse = v["heldout_ece_after"] > v["heldout_ece_before"]
                note.append(f"+cal: held-out ECE {v['heldout_ece_before']:.3f} → {v['heldout_ece_after']:.3f}"
                            + (" (calibrate refuses: worse)" if worse else ""))
            if "cases_outside_1_3_topics" in v:
                note.append(f"outside 1–3 topics: {v['cases_outside_1_3_topics']}, changed by solver: "
                            f"{v['constraint_changed']}")
            e = m["ece"]
            nll = "—" if v.get("nll") is None else f"{v['nll']:.3f}"
            lines.append(f"| {s['dataset']} | {mode} | {m['n']} | {s['n_fit']} | {m['accuracy']['value']:.3f} | "
                         f"{m['macro_f1']['value']:.3f} | {e['value']:.3f} [{e['lo']:.3f}, {e['hi']:.3f}] | "
                         f"{v['ece_floor']:.3f} | {nll} | {100 * (m['macro_f1']['value'] - base):+.1f} | "
                         f"{'; '.join(note)} |")
    return "\n".join(lines) + "\n"
