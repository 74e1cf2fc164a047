"""Choosing each field's decision rule by cross-validation on the calibration split only.

Candidates per field (every one computed from the same stored raw scores, :mod:`typedlm.decide.calibrate.collect`):

- scalar fields: prior mode (``priors``: none / neutral, batch on request) × calibrator kind and its ``l2``
  (:func:`typedlm.decide.calibrate.fit.select_scalar`);
- multi fields: prior mode × set rule (threshold / count / cardinality, :mod:`typedlm.decide.cardinality`) ×
  calibrator (the pooled ``logistic`` or the per-option ``vector``), the threshold fitted inside the fold.

Each candidate is fitted on :data:`FOLDS` − 1 folds and scored on the held-out fold: accuracy (multi: the
exact set). The choice: the best cross-validated accuracy; candidates within one standard error of it
(sqrt(p (1 - p) / n)) count as tied and the tie goes to the lowest cross-validated ECE (among rules that decide
equally well, the one whose probabilities are best calibrated), then NLL (scalar) / the smallest mean
|set size - gold size| (multi), then to the earlier candidate (the default prior first).
The chosen rule is refitted on every calibration case. Nothing here sees another split.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .bundle import LOG_FLOOR, MULTI_KINDS, SCALAR_KINDS, FieldCalibration, ece
from .fit import (FOLDS, Example, _multi_data, _scalar_data, best_set, field_points, fit_kind, fit_logistic,
                  fit_option_logistic, fit_threshold, multi_rows, select_scalar)
from ..cardinality import SET_RULES, fitted

PRIORS = ("neutral", "none")  # the default first: it wins exact ties


def _near_best(rows: list[dict]) -> list[dict]:
    best = max(r["cv_acc"] for r in rows)
    n = max(rows[0]["n"], 1)
    se = math.sqrt(best * (1 - best) / n)
    return [r for r in rows if r["cv_acc"] >= best - se - 1e-12]


def pick(rows: list[dict], ftype: str) -> dict:
    """The chosen candidate row: the best CV accuracy, ties (within one standard error) to the lowest CV ECE, then
    NLL (scalar) / the smallest CV set-size error (multi), then to the earlier row."""
    tie = (lambda r: (r["cv_ece"], r["cv_size_error"])) if ftype == "multi" else (lambda r: (r["cv_ece"], r["cv_nll"]))
    return min(_near_best(rows), key=tie)


def fit_multi(examples: list[Example], field: str, n: int, rule: str, prior: str,
              kind: str = "logistic") -> FieldCalibration:
    """The multi rule ``rule`` fitted on ``examples``: the calibrator ``kind`` (pooled logistic (a, b) or per-option
    vector), the set-size prior, the threshold."""
    card = fitted([len(ex.gold[field]) for ex in examples if ex.gold.get(field) is not None], n) \
        if rule == "cardinality" else None
    count = fit_count(examples, field, n) if rule == "count" else {}
    if kind == "vector":
        options = sorted({o for ex in examples for o in (ex.scores.get(field) or {})})
        scale, bias = fit_option_logistic(examples, field, options)
        fc = FieldCalibration(type="multi", kind="vector", choices=options, scale=scale, bias=bias, prior=prior,
                              set_rule=rule, cardinality=card, **count)
    else:
        a, b = fit_logistic(*_multi_data(examples, field))
        fc = FieldCalibration(type="multi", kind="logistic", a=a, b=b, prior=prior, set_rule=rule, cardinality=card,
                              **count)
    t = fit_threshold(multi_rows(examples, field, fc), size_term(rule, fc))
    return fc.model_copy(update={"threshold": t})


def fit_count(examples: list[Example], field: str, n: int) -> dict:
    """The set rule ``count``'s count map: vector scaling of the count question's log-probabilities (sizes 0..n)
    fitted against the gold set sizes (``{}`` when no example has a count question)."""
    rows = [(ex.counts[field], min(len(ex.gold[field]), n)) for ex in examples
            if ex.counts.get(field) is not None and ex.gold.get(field) is not None]
    if len(rows) < 2:
        return {}
    x = np.maximum(np.asarray([r for r, _ in rows], dtype=np.float64), LOG_FLOOR)
    fc = fit_kind([str(k) for k in range(n + 1)], "enum", x, np.asarray([g for _, g in rows]), "vector")
    return {"count_scale": fc.scale, "count_bias": fc.bias}


def size_term(rule: str, fc: FieldCalibration | None) -> Callable:
    """row's count-question log-probs -> the set-size term of ``rule`` (``fc``: its count map / set-size prior)."""
    if rule == "count":
        return lambda count: count if fc is None or count is None else fc.count_log_probs(count)
    if rule == "cardinality":
        return lambda count: fc.cardinality
    return lambda count: None


def cv_multi(examples: list[Example], field: str, n: int, rule: str, prior: str, kind: str = "logistic") -> dict:
    """Cross-validated exact-set accuracy, mean |size - gold size|, option-level ECE of one multi candidate."""
    ex = [e for e in examples if e.scores.get(field) is not None and e.gold.get(field) is not None]
    folds = min(FOLDS, len(ex))
    hit, off, conf, ok = [], [], [], []
    for f in range(folds):
        train = [e for i, e in enumerate(ex) if i % folds != f]
        held = [e for i, e in enumerate(ex) if i % folds == f]
        fc = fit_multi(train, field, n, rule, prior, kind)
        term = size_term(rule, fc)
        for opts, z, count, gold in multi_rows(held, field, fc):
            sel = {opts[i] for i in best_set(z, fc.threshold, term(count))}
            hit.append(sel == gold)
            off.append(abs(len(sel) - len(gold)))
        c, k = field_points(held, field, "multi", fc)
        conf += c
        ok += k
    return {"prior": prior, "set_rule": rule, "kind": kind, "cv_acc": float(np.mean(hit)) if hit else 0.0,
            "cv_size_error": float(np.mean(off)) if off else 0.0, "cv_ece": ece(conf, ok), "n": len(hit)}


def choose_field(name: str, ftype: str, n_options: int, by_prior: dict[str, list[Example]], *, kinds=SCALAR_KINDS,
                 set_rules=SET_RULES, multi_kinds=MULTI_KINDS) -> tuple[FieldCalibration, dict]:
    """One field's rule: every candidate cross-validated, the choice refitted on every example; and its record
    ({"chosen": the winning row, "candidates": every row})."""
    rows = []
    for prior, ex in by_prior.items():
        if ftype == "multi":
            rows += [cv_multi(ex, name, n_options, rule, prior, k) for rule in set_rules for k in multi_kinds]
        else:
            keys, x, gold = _scalar_data(ex, name)
            rows += [{"prior": prior, **r} for r in select_scalar(keys, ftype, x, gold, kinds)[1]]
    if not rows:
        raise ValueError(f"field '{name}': too few labelled calibration cases to cross-validate a rule")
    best = pick(rows, ftype)
    ex = by_prior[best["prior"]]
    if ftype == "multi":
        fc = fit_multi(ex, name, n_options, best["set_rule"], best["prior"], best["kind"])
    else:
        keys, x, gold = _scalar_data(ex, name)
        l2 = best["l2"] if best["l2"] is not None else 1.0
        fc = fit_kind(keys, ftype, x, gold, best["kind"], l2).model_copy(update={"prior": best["prior"]})
    return fc, {"chosen": best, "candidates": rows}


def choose_rules(types: dict[str, str], sizes: dict[str, int], by_prior: dict[str, list[Example]], *,
                 kinds=SCALAR_KINDS, set_rules=SET_RULES, progress: Callable | None = None) -> tuple[dict, dict]:
    """Every field's rule ({field: FieldCalibration}) and records ({field: {"chosen", "candidates"}}).
    ``by_prior``: the calibration examples under each candidate prior mode; ``progress(field)`` after each."""
    fields, records = {}, {}
    for name, ftype in types.items():
        fields[name], records[name] = choose_field(name, ftype, sizes[name], by_prior, kinds=kinds,
                                                   set_rules=set_rules)
        if progress:
            progress(name)
    return fields, records
