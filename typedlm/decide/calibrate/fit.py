"""Fitting calibration parameters from labelled scores, and choosing the calibrator kind.

Every scalar kind of :mod:`typedlm.decide.calibrate.bundle` is a multinomial logistic model of the
(clipped) log-scores, linear in its parameters, so its negative log-likelihood is convex:

- ``temperature``: golden-section search on log T in [0.02, 50] (one parameter, no penalty);
- ``bias`` / ``vector`` / ``matrix``: Newton's method with a backtracking line search on
  NLL + ``l2``/2 · |θ − θ₀|², where θ₀ is the fitted temperature alone (so the penalty shrinks towards
  temperature scaling, not towards the raw scores).

:func:`select_scalar` cross-validates every kind (and its ``l2``) on the fit examples only
(:data:`FOLDS` folds stratified by gold class: accuracy, NLL, ECE); :mod:`typedlm.decide.calibrate.rulefit` chooses among them together with
the prior mode. Multi fields get the pooled ``logistic`` (Newton, weight-1 L2) or the per-option ``vector``
(:func:`fit_option_logistic`: each option's own scale and bias, its L2 shrinking towards the pooled fit) and a
threshold for their set rule (:func:`fit_threshold`, :func:`best_set`).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from pydantic import BaseModel

from .bundle import LOG_FLOOR, SCALAR_KINDS, FieldCalibration, ece
from ..logmath import log_sigmoid, log_softmax

FOLDS = 5
T_MAX = 50.0  # the largest temperature fitted (scores with no information get the flattest allowed)
L2_GRID = (0.1, 1.0, 10.0)


class Example(BaseModel):
    """One labelled decision: per field the final log-scores (scalar: choice -> log p; multi: option ->
    log P(yes)) and the gold value (scalar: a choice key, booleans "true"/"false"; multi: list)."""
    scores: dict[str, dict[str, float]]
    gold: dict[str, str | bool | list[str] | None]
    counts: dict[str, list[float]] = {}  # multi fields: the count question's log-probabilities (0..N)


# -- data --------------------------------------------------------------------------------------------
def _scalar_data(examples: list[Example], field: str):
    """(choices, [n, K] clipped log-scores, [n] gold index) of one scalar field."""
    keys, logits, gold = None, [], []
    for ex in examples:
        sc, g = ex.scores.get(field), ex.gold.get(field)
        if sc is None or g is None:
            continue
        g = ("true" if g else "false") if isinstance(g, bool) else g
        keys = keys or list(sc)
        if g not in keys:
            continue
        logits.append([max(sc[k], LOG_FLOOR) for k in keys])
        gold.append(keys.index(g))
    return keys or [], np.asarray(logits, dtype=np.float64).reshape(len(gold), len(keys or [])), \
        np.asarray(gold, dtype=int)


def _log_no(ly: float) -> float:
    return math.log(max(-math.expm1(ly), 1e-300))


def _multi_data(examples: list[Example], field: str, option: str | None = None):
    """(log-odds, outcome) of every option (``option``: that one alone) of every labelled example."""
    z, y = [], []
    for ex in examples:
        sc, g = ex.scores.get(field), ex.gold.get(field)
        if sc is None or g is None:
            continue
        for opt, ly in sc.items():
            if option is None or opt == option:
                z.append(ly - _log_no(ly))
                y.append(1 if opt in g else 0)
    return z, y


def _yes_logit(fc: FieldCalibration | None, opt: str, ly: float) -> float:
    return fc.yes_logit(opt, ly, _log_no(ly)) if fc is not None else ly - _log_no(ly)


def field_points(examples: list[Example], field: str, ftype: str, fc: FieldCalibration | None = None):
    """(confidence, outcome) pairs for ECE and reliability diagrams, after applying ``fc`` if given."""
    conf, ok = [], []
    if ftype == "multi":
        for ex in examples:  # the yes/no decision's confidence, as the eval harness bins it
            sc, g = ex.scores.get(field), ex.gold.get(field)
            if sc is None or g is None:
                continue
            for opt, ly in sc.items():
                p = math.exp(log_sigmoid(_yes_logit(fc, opt, ly)))
                conf.append(max(p, 1 - p))
                ok.append(1.0 if (p >= 0.5) == (opt in g) else 0.0)
        return conf, ok
    _keys, logits, gold = _scalar_data(examples, field)
    for r, g in zip(logits, gold):
        p = np.exp(fc.log_probs(r) if fc else log_softmax(list(r)))
        conf.append(float(p.max()))
        ok.append(1.0 if int(p.argmax()) == g else 0.0)
    return conf, ok


# -- the fits ----------------------------------------------------------------------------------------
def fit_temperature(logits, gold) -> float:
    """T minimizing the NLL of ``gold`` under softmax(logits / T) (golden-section search on log T)."""
    rows = np.asarray(logits, dtype=np.float64)
    if rows.size == 0:
        return 1.0
    g = np.asarray(gold, dtype=int)

    def nll(log_t: float) -> float:
        return float(-_lsm(rows / math.exp(log_t))[np.arange(len(g)), g].sum())

    lo, hi = math.log(0.02), math.log(T_MAX)
    phi = (math.sqrt(5) - 1) / 2
    a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
    fa, fb = nll(a), nll(b)
    for _ in range(60):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - phi * (hi - lo)
            fa = nll(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + phi * (hi - lo)
            fb = nll(b)
    return math.exp((lo + hi) / 2)


def fit_logistic(z: list[float], y: list[int], l2: float = 1.0,
                 centre: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """(a, b) maximizing sum log sigmoid(+-(a z + b)) - l2 |(a, b) - centre|^2 / 2 by Newton's method."""
    if not z:
        return (1.0, 0.0) if centre == (0.0, 0.0) else centre
    X = np.stack([np.asarray(z, dtype=np.float64), np.ones(len(z))], axis=1)
    t = np.asarray(y, dtype=np.float64)
    c = np.asarray(centre, dtype=np.float64)
    w = np.array([1.0, 0.0]) if centre == (0.0, 0.0) else c.copy()
    for _ in range(100):
        p = 0.5 * (1 + np.tanh(0.5 * (X @ w)))  # sigmoid, without overflow
        grad = X.T @ (p - t) + l2 * (w - c)
        H = (X * (p * (1 - p))[:, None]).T @ X + l2 * np.eye(2)
        step = np.linalg.solve(H, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(w[0]), float(w[1])


OPTION_L2 = 4.0  # per-option fits: the L2 weight pulling each option's (scale, bias) to the pooled fit


def fit_option_logistic(examples: list[Example], field: str, options: Sequence[str],
                        l2: float = OPTION_L2) -> tuple[list[float], list[float]]:
    """Per option (scale, bias) of the multi kind ``vector``: each option's logistic fit, shrunk towards the
    pooled :func:`fit_logistic` (so an option seen rarely keeps the pooled map)."""
    pooled = fit_logistic(*_multi_data(examples, field))
    fits = [fit_logistic(*_multi_data(examples, field, o), l2=l2, centre=pooled) for o in options]
    return [a for a, _ in fits], [b for _, b in fits]


THRESHOLDS = tuple(round(0.25 * i, 2) for i in range(-12, 13))  # nats of log-odds searched by fit_threshold


def best_set(z: Sequence[float], t: float, sizes: Sequence[float] | None, lo: int = 0, hi: int | None = None) -> list[int]:
    """The multi rule's selection (:mod:`typedlm.decide.constraints.joint`, one field without cross-field constraints):
    each option's gain is its log-odds ``z - t``; the best size ``k`` in [lo, hi] takes the ``k`` best gains
    plus ``sizes[k]`` (the set-size term; None: 0). Indices of the selected options."""
    order = sorted(range(len(z)), key=lambda i: -z[i])
    hi = len(z) if hi is None else hi
    best, best_k, run = -math.inf, lo, 0.0
    for k in range(0, hi + 1):
        if k:
            run += z[order[k - 1]] - t
        if k >= lo:
            v = run + (sizes[k] if sizes is not None else 0.0)
            if v > best:
                best, best_k = v, k
    return order[:best_k]


def multi_rows(examples: list[Example], field: str, fc: FieldCalibration | None):
    """(options, calibrated log-odds, count-question log-probs, gold set) per example of a multi field
    (``fc`` None: the log-odds as scored)."""
    rows = []
    for ex in examples:
        sc, g = ex.scores.get(field), ex.gold.get(field)
        if sc is None or g is None:
            continue
        z = [_yes_logit(fc, opt, ly) for opt, ly in sc.items()]
        rows.append((list(sc), z, ex.counts.get(field), set(g)))
    return rows


def fit_threshold(rows, size_term) -> float:
    """The threshold t with the most exact sets on ``rows`` (:func:`multi_rows`), the set-size term of a row
    being ``size_term(row)``; ties: the smallest mean |set size - gold size|, then the smallest |t|."""
    if not rows:
        return 0.0

    def quality(t: float):
        hit, off = 0, 0.0
        for opts, z, count, gold in rows:
            sel = {opts[i] for i in best_set(z, t, size_term(count))}
            hit += sel == gold
            off += abs(len(sel) - len(gold))
        return hit, -off / len(rows), -abs(t)

    return max(THRESHOLDS, key=quality)


def _lsm(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _design(x: np.ndarray, kind: str) -> np.ndarray:
    """[n, K, d] features: calibrated logits = design @ theta."""
    n, k = x.shape
    eye = np.broadcast_to(np.eye(k), (n, k, k))
    if kind == "bias":  # theta = [1/T, b_1..b_K]
        return np.concatenate([x[:, :, None], eye], 2)
    if kind == "vector":  # [s_1..s_K, b_1..b_K]
        return np.concatenate([x[:, :, None] * np.eye(k), eye], 2)
    w = np.zeros((n, k, k * k))  # matrix: [W row-major, b]
    for c in range(k):
        w[:, c, c * k:(c + 1) * k] = x
    return np.concatenate([w, eye], 2)


def _theta0(kind: str, k: int, inv_t: float) -> np.ndarray:
    lin = {"bias": np.array([inv_t]), "vector": np.full(k, inv_t), "matrix": (np.eye(k) * inv_t).ravel()}[kind]
    return np.concatenate([lin, np.zeros(k)])


def _newton(F: np.ndarray, gold: np.ndarray, theta0: np.ndarray, l2: float, offset=0.0) -> np.ndarray:
    """argmin NLL(softmax(offset + F @ theta)) + l2/2 |theta - theta0|^2 (convex; damped Newton)."""
    n, k, d = F.shape
    Y = np.eye(k)[gold]

    def objective(t):
        return -_lsm(offset + F @ t)[np.arange(n), gold].sum() + l2 / 2 * ((t - theta0) ** 2).sum()

    th = theta0.copy()
    f = objective(th)
    for _ in range(100):
        P = np.exp(_lsm(offset + F @ th))
        grad = np.einsum("nc,ncd->d", P - Y, F) + l2 * (th - theta0)
        fbar = np.einsum("nc,ncd->nd", P, F)
        H = np.einsum("nc,ncd,nce->de", P, F, F) - fbar.T @ fbar + l2 * np.eye(d)
        step = np.linalg.solve(H, grad)
        s = 1.0
        while s > 1e-8:
            f_new = objective(th - s * step)
            if f_new <= f:
                break
            s /= 2
        else:
            break
        th, f = th - s * step, f_new
        if np.abs(s * step).max() < 1e-9:
            break
    return th


def fit_kind(keys: list[str], ftype: str, x: np.ndarray, gold: np.ndarray, kind: str,
             l2: float = 1.0) -> FieldCalibration:
    """One scalar calibrator of ``kind`` (or :data:`CLASS_PRIOR`: the scores ignored, the add-one smoothed
    log class shares as a matrix calibrator with zero weights) fitted on (x, gold)."""
    k = len(keys)
    if kind == CLASS_PRIOR:
        shares = np.log((np.bincount(gold, minlength=k) + 1.0) / (len(gold) + k))
        return FieldCalibration(type=ftype, kind="matrix", choices=keys, weights=np.zeros((k, k)).tolist(),
                                bias=[float(v) for v in shares])
    t = fit_temperature(x, gold)
    if kind == "temperature":
        return FieldCalibration(type=ftype, kind="temperature", temperature=t)
    th = _newton(_design(x, kind), gold, _theta0(kind, k, 1.0 / t), l2)
    bias = [float(v) for v in th[-k:]]
    if kind == "bias":
        if th[0] <= 1.0 / T_MAX:  # scores that carry no (or inverted) information: flattest temperature
            return _flat_bias(keys, ftype, x, gold, l2)
        return FieldCalibration(type=ftype, kind="bias", choices=keys, temperature=float(1.0 / th[0]), bias=bias)
    if kind == "vector":
        return FieldCalibration(type=ftype, kind="vector", choices=keys, scale=[float(v) for v in th[:k]], bias=bias)
    return FieldCalibration(type=ftype, kind="matrix", choices=keys,
                            weights=th[:k * k].reshape(k, k).tolist(), bias=bias)


def _flat_bias(keys: list[str], ftype: str, x: np.ndarray, gold: np.ndarray, l2: float) -> FieldCalibration:
    k = len(keys)
    only_bias = _newton(np.broadcast_to(np.eye(k), (len(x), k, k)), gold, np.zeros(k), l2, offset=x / T_MAX)
    return FieldCalibration(type=ftype, kind="bias", choices=keys, temperature=T_MAX,
                            bias=[float(v) for v in only_bias])


def _nll(fc: FieldCalibration, x: np.ndarray, gold: np.ndarray) -> np.ndarray:
    return np.array([-fc.log_probs(r)[g] for r, g in zip(x, gold)])


CLASS_PRIOR = "class_prior"  # a candidate with every kind: the gold class shares alone (matrix with W = 0)


def candidates(kinds=SCALAR_KINDS) -> list[tuple[str, float | None]]:
    """(kind, l2) pairs to cross-validate; with more than one kind also :data:`CLASS_PRIOR`, so a field whose
    scores carry no usable signal can fall back to its most frequent class."""
    extra = [(CLASS_PRIOR, 1.0)] if len(kinds) > 1 else []
    return [(k, None) if k == "temperature" else (k, l2) for k in kinds for l2 in
            ((None,) if k == "temperature" else L2_GRID)] + extra


def stratified_folds(gold: np.ndarray, folds: int) -> np.ndarray:
    """Each example's fold: the examples sorted by gold class (stably), then dealt round-robin, so every fold
    holds each class in its share. (Dealing in case order instead can leave a fold's training part with
    another majority class than the fold itself: the class-prior candidate then scores below the majority.)"""
    fold = np.empty(len(gold), dtype=int)
    fold[np.argsort(gold, kind="stable")] = np.arange(len(gold)) % folds
    return fold


def select_scalar(keys: list[str], ftype: str, x: np.ndarray, gold: np.ndarray, kinds=SCALAR_KINDS):
    """The candidate with the lowest cross-validated NLL, refitted on every example; and the table
    [{"kind", "l2", "cv_acc", "cv_nll", "cv_ece", "n"}] it was chosen from."""
    n = len(gold)
    folds = min(FOLDS, n)
    fold = stratified_folds(gold, max(folds, 1))
    table = []
    for kind, l2 in candidates(kinds):
        if folds < 2:
            continue
        nll = np.zeros(n)
        conf, hit = np.zeros(n), np.zeros(n)
        for f in range(folds):
            te = fold == f
            fc = fit_kind(keys, ftype, x[~te], gold[~te], kind, l2 if l2 is not None else 1.0)
            nll[te] = _nll(fc, x[te], gold[te])
            p = np.exp(np.array([fc.log_probs(r) for r in x[te]]))
            conf[te], hit[te] = p.max(1), p.argmax(1) == gold[te]
        table.append({"kind": kind, "l2": l2, "cv_acc": float(hit.mean()), "cv_nll": float(nll.mean()),
                      "cv_ece": ece(conf, hit), "n": int(n)})
    best = min(table, key=lambda r: r["cv_nll"]) if table else {"kind": kinds[0], "l2": None}
    fc = fit_kind(keys, ftype, x, gold, best["kind"], best["l2"] if best["l2"] is not None else 1.0)
    return fc, table


def evaluate(examples: list[Example], types: dict[str, str], fields: dict[str, FieldCalibration] | None) -> dict:
    """Per field and pooled ECE (pooled over every point of every field), and the mean NLL of scalar fields."""
    per, allc, allk = {}, [], []
    for name, ftype in types.items():
        fc = fields.get(name) if fields else None
        c, k = field_points(examples, name, ftype, fc)
        per[name] = {"ece": ece(c, k), "n": len(c)}
        if ftype != "multi":
            _keys, x, gold = _scalar_data(examples, name)
            lp = [fc.log_probs(r) if fc else log_softmax(list(r)) for r in x]
            per[name]["nll"] = float(-np.mean([p[g] for p, g in zip(lp, gold)])) if len(gold) else float("nan")
        allc += c
        allk += k
    return {"ece": ece(allc, allk), "fields": per}
