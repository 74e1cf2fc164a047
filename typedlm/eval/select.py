"""Choosing prior / calibration / few-shot examples on validation cases, then reporting the choice on test.

``typedlm select`` (one dataset per call): the validation cases are the first ``fit_n`` cases of the
calibration split (seeded order). Every variant — ``k`` train-split examples in the schema (k in ``ks``) ×
prior ``neutral`` / ``none`` / ``batch`` × without / with a calibration bundle — is scored on them as the
mean over fields of the field's accuracy (multi fields: exact set). A ``+cal`` variant is scored by
:data:`FOLDS`-fold cross-validation (its bundle fitted on the other folds exactly as ``typedlm calibrate``
fits one), so no variant is judged on cases it was fitted on. The best variant (ties: the earlier one in
:func:`variants` order, the default first) is fitted on all validation cases and applied once to the test
split, beside the default; the test split plays no part in the choice.

The model runs once per case and ``k`` (:func:`typedlm.decide.calibrate.collect.collect`, resumable
``scores-k<k>.jsonl``); every variant is computed from those scores through decide's own functions.
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from ..decide.calibrate import collect as fitting
from ..decide.api import plan_for
from ..decide.options import DecideOptions
from ..errors import TypedLMError
from .cases import Case, check_case, select, with_examples
from .runner import prediction_line, read_jsonl
from .tracks import decision_answers

FOLDS = 5
PRIORS = ("neutral", "none", "batch")  # the default first: it wins ties


@dataclass(frozen=True)
class Variant:
    k: int  # few-shot examples from the train split
    prior: str
    cal: bool  # a bundle fitted on the validation cases

    @property
    def name(self) -> str:
        return f"k{self.k}+{self.prior}" + ("+cal" if self.cal else "")


DEFAULT = Variant(0, "neutral", False)


def variants(ks: list[int]) -> list[Variant]:
    return [Variant(k, p, c) for k in ks for c in (False, True) for p in PRIORS]


def hit(ftype: str, gold, value) -> bool:
    """Whether a field's decided value is the gold one (multi: the exact set)."""
    if value is None:
        return False
    return sorted(gold) == sorted(value) if ftype == "multi" else gold == value


def hits(schema, ds: list, cases: list) -> dict[str, list[bool]]:
    return {f.name: [hit(f.type, c.gold[f.name], d.fields[f.name].value) for d, c in zip(ds, cases)]
            for f in schema.fields}


def decide_variant(engine, plan, fit: list, cases: list, v: Variant, neutral):
    """Decisions on ``cases`` under ``v``; a ``+cal`` variant's bundle is fitted on ``fit``."""
    bundle = fitting.fit_bundle(engine, plan, fit, neutral, priors=(v.prior,))[0] if v.cal else None
    opts = DecideOptions(scoring=plan.scoring, prior=v.prior, calibration=bundle)
    return fitting.decisions(plan, cases, engine.name, opts, neutral), bundle


def validate(engine, plan, fit: list, v: Variant, neutral) -> dict[str, list[bool]]:
    """Per field, per validation case: right or wrong under ``v`` (``+cal``: cross-validated)."""
    if not v.cal:
        return hits(plan.schema, decide_variant(engine, plan, fit, fit, v, neutral)[0], fit)
    out: dict[str, list] = {f.name: [None] * len(fit) for f in plan.schema.fields}
    for i in range(FOLDS):
        held = [j for j in range(len(fit)) if j % FOLDS == i]
        train = [c for j, c in enumerate(fit) if j % FOLDS != i]
        ds, _ = decide_variant(engine, plan, train, [fit[j] for j in held], v, neutral)
        for name, hs in hits(plan.schema, ds, [fit[j] for j in held]).items():
            for j, h in zip(held, hs):
                out[name][j] = h
    return out


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0


def score(h: dict[str, list[bool]]) -> float:
    """The choice criterion: the mean over fields of the field's accuracy."""
    return mean(mean(v) for v in h.values())


class Scored:
    """Scores of one dataset per ``k``, collected on demand (resumable files in ``out``)."""

    def __init__(self, engine, cases_all: list[Case], out: Path):
        self.engine, self.cases_all, self.out, self._plans = engine, cases_all, out, {}

    def plan(self, k: int):
        if k not in self._plans:
            schema = with_examples(self.cases_all[:1], self.cases_all, k)[0].schema
            plan = plan_for(schema, self.engine)
            self._plans[k] = (plan, fitting.neutral_logs(self.engine, plan))
        return self._plans[k]

    def scores(self, k: int, cases: list[Case]) -> list:
        return fitting.collect(self.engine, self.plan(k)[0].schema, cases, self.out / f"scores-k{k}.jsonl")


def choose(scored: Scored, fit_cases: list[Case], ks: list[int]) -> list[dict]:
    """Every variant's validation accuracy per field (and the criterion), in :func:`variants` order."""
    rows = []
    for k in ks:
        plan, neutral = scored.plan(k)
        fit = scored.scores(k, fit_cases)
        for v in (v for v in variants(ks) if v.k == k):
            h = validate(scored.engine, plan, fit, v, neutral)
            rows.append({"variant": v.name, "k": v.k, "prior": v.prior, "cal": v.cal, "score": score(h),
                         "fields": {n: mean(x) for n, x in h.items()}})
    return rows


def run_select(engine, name: str, cases_all: list[Case], out: Path, *, fit_n: int, test_n: int, ks: list[int],
               naive: Path | None = None) -> dict:
    """Choose on validation, apply to test; writes an eval run folder (modes ``default`` and ``selected``,
    plus the naive run's lines on the same test cases) and ``selection.json``."""
    if 0 not in ks:
        raise TypedLMError("--examples must include 0 (the default variant)")
    fit_cases, test_cases = select(cases_all, "calibration", fit_n), select(cases_all, "test", test_n)
    if len(fit_cases) < 2 * FOLDS or not test_cases:
        raise TypedLMError(f"{name}: {len(fit_cases)} validation / {len(test_cases)} test cases "
                           f"(need at least {2 * FOLDS} and 1)")
    out.mkdir(parents=True, exist_ok=True)
    scored = Scored(engine, cases_all, out)
    rows = choose(scored, fit_cases, ks)
    best = max(rows, key=lambda r: r["score"])  # the first of equal scores
    chosen = Variant(best["k"], best["prior"], best["cal"])
    by_id = {c.id: c for c in test_cases}
    gold = {c.id: check_case(c)[1] for c in test_cases}  # labels as prediction lines carry them
    lines, test = [], {}
    for mode, v in (("default", DEFAULT), ("selected", chosen)):
        plan, neutral = scored.plan(v.k)
        fit, tst = scored.scores(v.k, fit_cases), scored.scores(v.k, test_cases)
        ds, bundle = decide_variant(engine, plan, fit, tst, v, neutral)
        if bundle is not None:
            (out / "bundle-selected.json").write_text(bundle.model_dump_json(indent=2) + "\n")
        test[mode] = {"variant": v.name, "fields": {n: mean(x) for n, x in hits(plan.schema, ds, tst).items()}}
        for c, d in zip(tst, ds):
            for a in decision_answers(plan.schema, d, c.latency_s):
                lines.append(prediction_line(run_id=f"select-{name}", track="parallel", mode=mode, case=by_id[c.id],
                                             dataset=name, gold=gold[c.id], answer=a,
                                             case_latency_s=c.latency_s, permutation=None))
    if naive is not None:
        lines += [x for x in read_jsonl(naive / "predictions.jsonl")
                  if x["track"] == "naive_local" and x["case_id"] in by_id and x["permutation"] is None]
    (out / "predictions.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    summary = {"dataset": name, "n_validation": len(fit_cases), "n_test": len(test_cases), "folds": FOLDS,
               "examples": ks, "chosen": chosen.name, "validation": rows, "test": test,
               "naive": str(naive) if naive else None}
    meta = {"run_id": f"select-{name}", "dataset": name, "split": "test", "status": "finished",
            "cases": len(test_cases), "cases_finished": len(test_cases), "model": engine.name, "model_sha256": None,
            "provenance": {"command": " ".join(["typedlm"] + sys.argv[1:]), "python": platform.python_version(),
                           "machine": platform.machine()}, "select": summary}
    (out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    (out / "selection.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
