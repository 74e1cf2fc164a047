"""Metrics over ``predictions.jsonl`` lines, each with a 95 % bootstrap interval over cases.

Per (track, mode, field), on the unpermuted lines (one per case):

| metric | scalar fields (enum / boolean) | multi fields |
|---|---|---|
| ``accuracy`` | pred == gold | exact set match |
| ``balanced_accuracy`` | mean recall over gold classes present | mean over options of (TPR + TNR) / 2 |
| ``macro_f1`` | mean F1 over classes seen in gold or pred | mean over options of the option's F1 |
| ``majority_baseline`` | share of the most common gold class | share of the most common gold set |
| ``ece`` | 15 equal-width bins of top-1 confidence | the same over option-level P(yes) decisions |
| ``brier`` | mean Σ_c (p_c − y_c)² | mean over options (p − y)² |
| ``flip_rate`` | pred differs between the case and the same case with choices permuted | same, on sets |
| ``violation_rate`` | the model's own answer was not a legal value | same |
| ``truncation_rate`` | the answer was cut by ``max_tokens`` (naive) / a choice got the top-k floor (openai) | same |
| ``set_size`` / ``gold_set_size`` | — | mean number of options selected / in the gold set |
| ``latency_p50_s`` / ``latency_p95_s`` | of the case latency (the call(s) answering the case) | same |
| ``decisions_per_s`` | field decisions / seconds spent | same |

An answer without probabilities (invalid naive output) counts as uniform (scalar) / P(yes) = 0.5 (multi).
Intervals: percentile bootstrap (``n_boot`` resamples of the cases, seeded); paired comparisons between two
tracks resample the cases they share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..decide.calibrate.bundle import ece, ece_floor
from ..errors import TypedLMError

ECE_BINS = 15
METRICS = ("accuracy", "balanced_accuracy", "macro_f1", "majority_baseline", "ece", "brier", "flip_rate",
           "violation_rate", "truncation_rate", "set_size", "gold_set_size", "latency_p50_s", "latency_p95_s",
           "decisions_per_s")


@dataclass
class Group:
    """Per-case arrays for one (track, mode, field)."""
    key: tuple  # (track, mode, field)
    field_type: str
    choices: list
    case_ids: list
    gold: np.ndarray  # scalar: [n] class index; multi: [n, K] bool
    pred: np.ndarray  # scalar: [n] class index, -1 = no answer; multi: [n, K] bool
    probs: np.ndarray  # scalar: [n, K]; multi: [n, K] P(yes)
    correct: np.ndarray  # [n] bool
    violation: np.ndarray  # [n] bool
    latency: np.ndarray  # [n] case latency (s)
    weight: np.ndarray  # [n] 1 / fields in the case (share of the case latency)
    flip: np.ndarray  # [n] 1.0 flipped, 0.0 same, nan = no permuted counterpart
    truncated: np.ndarray  # [n] bool

    @property
    def multi(self) -> bool:
        return self.field_type == "multi"

    @property
    def n(self) -> int:
        return len(self.case_ids)


def groups_from_lines(lines: list[dict]) -> dict[tuple, Group]:
    base: dict[tuple, list[dict]] = {}
    perm: dict[tuple, dict[str, dict]] = {}
    fields_per_case: dict[tuple, int] = {}
    for ln in lines:
        key = (ln["track"], ln["mode"], ln["field"])
        if ln["permutation"] is None:
            base.setdefault(key, []).append(ln)
            ck = (ln["track"], ln["mode"], ln["case_id"])
            fields_per_case[ck] = fields_per_case.get(ck, 0) + 1
        else:
            perm.setdefault(key, {})[ln["case_id"]] = ln
    out = {}
    for key, rows in base.items():
        choices = rows[0]["choices"]
        if any(r["choices"] != choices for r in rows):
            raise TypedLMError(f"field '{key[2]}' ({key[0]}/{key[1]}) has different choices across cases: "
                               "metrics pool a field over cases, so its choices must be the same")
        k = len(choices)
        index = {c: i for i, c in enumerate(choices)}
        multi = rows[0]["field_type"] == "multi"
        n = len(rows)
        if multi:
            gold = np.array([[c in r["gold"] for c in choices] for r in rows], dtype=bool).reshape(n, k)
            pred = np.array([[c in (r["pred"] or []) for c in choices] for r in rows], dtype=bool).reshape(n, k)
            probs = np.array([[(r["probabilities"] or {}).get(c, 0.5) for c in choices] for r in rows],
                             dtype=float).reshape(n, k)
        else:
            gold = np.array([index[r["gold"]] for r in rows], dtype=int)
            pred = np.array([index.get(r["pred"], -1) if r["pred"] is not None else -1 for r in rows], dtype=int)
            probs = np.array([[r["probabilities"][c] for c in choices] if r["probabilities"] else [1.0 / k] * k
                              for r in rows], dtype=float).reshape(n, k)
        p = perm.get(key, {})
        flip = np.array([np.nan if r["case_id"] not in p else
                         float(_norm(p[r["case_id"]]["pred"]) != _norm(r["pred"])) for r in rows])
        out[key] = Group(key, rows[0]["field_type"], choices, [r["case_id"] for r in rows], gold, pred, probs,
                         np.array([bool(r["correct"]) for r in rows]), np.array([bool(r["violation"]) for r in rows]),
                         np.array([float(r["case_latency_s"]) for r in rows]),
                         np.array([1.0 / fields_per_case[(key[0], key[1], r["case_id"])] for r in rows]), flip,
                         np.array([bool(r.get("truncated")) for r in rows]))
    return out


def _norm(pred):
    return sorted(pred) if isinstance(pred, list) else pred


def _ece(conf: np.ndarray, hit: np.ndarray) -> float:
    return ece(conf, hit, ECE_BINS) if len(conf) else 0.0


def reliability_bins(g: Group) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean confidence, accuracy, count) per bin, for the plot."""
    conf, hit = _conf_hit(g, np.arange(g.n))
    b = np.minimum((conf * ECE_BINS).astype(int), ECE_BINS - 1)
    cnt = np.bincount(b, minlength=ECE_BINS)
    with np.errstate(invalid="ignore"):
        return (np.bincount(b, weights=conf, minlength=ECE_BINS) / cnt,
                np.bincount(b, weights=hit.astype(float), minlength=ECE_BINS) / cnt, cnt)


def _conf_hit(g: Group, idx: np.ndarray):
    if g.multi:
        p = g.probs[idx].ravel()
        y = g.gold[idx].ravel()
        return np.maximum(p, 1 - p), (p >= 0.5) == y
    p = g.probs[idx]
    return p.max(1), p.argmax(1) == g.gold[idx]


def compute(g: Group, idx: np.ndarray) -> dict:
    """Every metric on the cases ``idx`` (indices into the group, repeats allowed)."""
    k = len(g.choices)
    out: dict = {"accuracy": float(g.correct[idx].mean())}
    if g.multi:
        gold, pred = g.gold[idx], g.pred[idx]
        tp = (gold & pred).sum(0)
        fp = (~gold & pred).sum(0)
        fn = (gold & ~pred).sum(0)
        tn = (~gold & ~pred).sum(0)
        pos, neg = tp + fn, tn + fp
        both = (pos > 0) & (neg > 0)
        out["balanced_accuracy"] = float(np.mean((tp / np.maximum(pos, 1) + tn / np.maximum(neg, 1))[both] / 2)) \
            if both.any() else float("nan")
        seen = (tp + fp + fn) > 0
        out["macro_f1"] = float(np.mean((2 * tp / np.maximum(2 * tp + fp + fn, 1))[seen])) if seen.any() else 0.0
        sets = gold @ (1 << np.arange(k))
        out["majority_baseline"] = float(np.bincount(sets).max() / len(idx))
        p, y = g.probs[idx].ravel(), gold.ravel()
        out["brier"] = float(np.mean((p - y) ** 2))
        out["set_size"], out["gold_set_size"] = float(pred.sum(1).mean()), float(gold.sum(1).mean())
    else:
        gold, pred = g.gold[idx], g.pred[idx]
        cm = np.bincount(gold * (k + 1) + np.where(pred < 0, k, pred), minlength=k * (k + 1)).reshape(k, k + 1)
        tp = np.diag(cm[:, :k])
        support = cm.sum(1)
        present = support > 0
        out["balanced_accuracy"] = float(np.mean(tp[present] / support[present]))
        fp = cm[:, :k].sum(0) - tp
        fn = support - tp
        seen = (tp + fp + fn) > 0
        out["macro_f1"] = float(np.mean((2 * tp / np.maximum(2 * tp + fp + fn, 1))[seen]))
        out["majority_baseline"] = float(support.max() / len(idx))
        onehot = np.eye(k)[gold]
        out["brier"] = float(np.mean(((g.probs[idx] - onehot) ** 2).sum(1)))
        out["set_size"] = out["gold_set_size"] = None
    conf, hit = _conf_hit(g, idx)
    out["ece"] = _ece(conf, hit)
    f = g.flip[idx]
    f = f[~np.isnan(f)]
    out["flip_rate"] = float(f.mean()) if len(f) else None
    out["violation_rate"] = float(g.violation[idx].mean())
    out["truncation_rate"] = float(g.truncated[idx].mean())
    lat = g.latency[idx]
    out["latency_p50_s"], out["latency_p95_s"] = (float(x) for x in np.percentile(lat, [50, 95]))
    spent = float((lat * g.weight[idx]).sum())
    out["decisions_per_s"] = len(idx) / spent if spent > 0 else None
    return out


def _interval(samples: list, value):
    xs = np.array([s for s in samples if s is not None and not (isinstance(s, float) and np.isnan(s))], dtype=float)
    if value is None or len(xs) == 0:
        return {"value": value, "lo": None, "hi": None}
    lo, hi = np.percentile(xs, [2.5, 97.5])
    return {"value": value, "lo": float(lo), "hi": float(hi)}


def summarize(g: Group, *, n_boot: int = 1000, seed: int = 0) -> dict:
    """{metric: {"value", "lo", "hi"}} plus ``n`` (cases)."""
    point = compute(g, np.arange(g.n))
    rng = np.random.default_rng(seed)
    boots = [compute(g, rng.integers(0, g.n, g.n)) for _ in range(n_boot)]
    out = {m: _interval([b[m] for b in boots], point[m]) for m in METRICS}
    out["ece_floor"] = {"value": ece_floor(_conf_hit(g, np.arange(g.n))[0], ECE_BINS), "lo": None, "hi": None}
    out["n"] = g.n
    return out


def paired(a: Group, b: Group, *, n_boot: int = 1000, seed: int = 0) -> dict | None:
    """``a`` vs ``b`` on the cases both answered: accuracy difference (a − b) and speed ratio (b's seconds / a's),
    each with a paired bootstrap interval."""
    ia = {c: i for i, c in enumerate(a.case_ids)}
    ib = {c: i for i, c in enumerate(b.case_ids)}
    shared = [c for c in a.case_ids if c in ib]
    if not shared:
        return None
    xa = np.array([ia[c] for c in shared])
    xb = np.array([ib[c] for c in shared])

    def stats(sel):
        acc = a.correct[xa[sel]].mean() - b.correct[xb[sel]].mean()
        ta, tb = (a.latency[xa[sel]] * a.weight[xa[sel]]).sum(), (b.latency[xb[sel]] * b.weight[xb[sel]]).sum()
        return float(acc), float(tb / ta) if ta > 0 else None

    n = len(shared)
    acc0, sp0 = stats(np.arange(n))
    rng = np.random.default_rng(seed)
    boots = [stats(rng.integers(0, n, n)) for _ in range(n_boot)]
    return {"cases": n, "accuracy_diff": _interval([x for x, _ in boots], acc0),
            "speedup": _interval([y for _, y in boots], sp0)}
