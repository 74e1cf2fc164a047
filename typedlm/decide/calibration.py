"""Calibration with labels: a typed bundle, fitting, ECE, and applying a bundle to question scores.

Per scalar field (boolean / enum) a temperature ``T`` (log-scores / T, renormalized) fitted by
minimizing the negative log-likelihood of the gold labels; per multi field one pooled logistic
``P(yes) = sigmoid(a * (log P(yes) - log P(no)) + b)`` over all its options (Newton's method, a small L2
term, weight 1, keeps it finite on separable data). Scores are the ones a decision would use *after* the prior
correction of the bundle's prior mode, so a bundle is only valid with that prior mode.

:class:`CalibrationBundle` carries what it was made for (model fingerprint, prompt version, scoring
mode, prior mode); :meth:`CalibrationBundle.check` refuses any mismatch with a
:class:`CalibrationMismatch` naming it. ECE as the eval harness computes it (:mod:`typedlm.eval.metrics`):
15 equal-width bins; scalar fields on the top-1 confidence, multi fields on each option's yes/no decision
(confidence max(P(yes), P(no))), pooled over options.
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..errors import TypedLMError
from ..grammar.spec import canonical_json
from .result import QuestionScore

FORMAT = "typedlm-calibration/1"
BINS = 15


class CalibrationMismatch(TypedLMError):
    """A calibration bundle made for another model, prompt version, scoring mode, prior mode or schema."""


class FieldCalibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["boolean", "enum", "multi"]
    temperature: float | None = None  # scalar fields
    a: float | None = None  # multi fields: sigmoid(a * (log yes - log no) + b)
    b: float | None = None


class CalibrationBundle(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Literal["typedlm-calibration/1"] = FORMAT
    model: str
    model_hash: str
    prompt_version: str
    scoring: str
    prior: str
    fields: dict[str, FieldCalibration]
    fit: dict = {}  # informational: data, sizes, held-out ECE before/after

    @property
    def id(self) -> str:
        body = canonical_json({k: v for k, v in self.model_dump().items() if k != "fit"})
        return "cal-" + hashlib.sha256(body.encode()).hexdigest()[:10]

    def check(self, *, model_hash: str, prompt_version: str, scoring: str, prior: str, schema) -> None:
        for what, mine, theirs in (("model", self.model_hash, model_hash),
                                   ("prompt version", self.prompt_version, prompt_version),
                                   ("scoring mode", self.scoring, scoring), ("prior mode", self.prior, prior)):
            if mine != theirs:
                raise CalibrationMismatch(f"calibration bundle {self.id} was made for {what} {mine!r}, "
                                          f"this decision uses {theirs!r}: refit it with `typedlm calibrate`")
        for name, fc in self.fields.items():
            if name not in schema.names:
                raise CalibrationMismatch(f"calibration bundle {self.id} calibrates field {name!r}, "
                                          f"which the schema does not have")
            if schema[name].type != fc.type:
                raise CalibrationMismatch(f"calibration bundle {self.id}: field {name!r} was {fc.type}, "
                                          f"the schema's is {schema[name].type}")

    def apply(self, plan, scores: list[QuestionScore], questions=None) -> list[QuestionScore]:
        out = list(scores)
        for qi in (range(len(scores)) if questions is None else questions):
            q = plan.questions[qi]
            fc = self.fields.get(q.field)
            if fc is None or q.kind == "count":
                continue
            s = scores[qi]
            if fc.type == "multi":
                ly, ln = s.log_scores
                z = fc.a * (ly - ln) + fc.b
                out[qi] = QuestionScore((_log_sigmoid(z), _log_sigmoid(-z)), s.log_legal_mass)
            else:
                out[qi] = QuestionScore(tuple(_log_softmax([x / fc.temperature for x in s.log_scores])),
                                        s.log_legal_mass)
        return out

    def record(self, field: str) -> dict:
        fc = self.fields.get(field)
        if fc is None:
            return {}
        return {"calibrator": self.id, "temperature": fc.temperature}


def load_bundle(obj) -> CalibrationBundle:
    """A bundle from a CalibrationBundle, a dict, a JSON string or a path to a JSON file."""
    import json
    from pathlib import Path

    if isinstance(obj, CalibrationBundle):
        return obj
    try:
        if isinstance(obj, Path) or (isinstance(obj, str) and not obj.lstrip().startswith("{")):
            obj = json.loads(Path(obj).read_text())
        elif isinstance(obj, (str, bytes)):
            obj = json.loads(obj)
        return CalibrationBundle.model_validate(obj)
    except (OSError, ValueError) as e:
        raise TypedLMError(f"not a calibration bundle: {e}") from e


# -- math --------------------------------------------------------------------------------------------
def _log_softmax(x: list[float]) -> list[float]:
    m = max(x)
    z = m + math.log(sum(math.exp(v - m) for v in x))
    return [v - z for v in x]


def _log_sigmoid(z: float) -> float:
    return -math.log1p(math.exp(-z)) if z >= 0 else z - math.log1p(math.exp(z))


def fit_temperature(logits: list[list[float]], gold: list[int]) -> float:
    """T minimizing the NLL of ``gold`` under softmax(logits / T) (golden-section search on log T)."""
    if not logits:
        return 1.0
    rows = [np.asarray(r, dtype=np.float64) for r in logits]

    def nll(log_t: float) -> float:
        t = math.exp(log_t)
        tot = 0.0
        for r, g in zip(rows, gold):
            z = r / t
            m = z.max()
            tot -= z[g] - m - math.log(np.exp(z - m).sum())
        return tot

    lo, hi = math.log(0.02), math.log(50.0)
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


def fit_logistic(z: list[float], y: list[int], l2: float = 1.0) -> tuple[float, float]:
    """(a, b) maximizing sum log sigmoid(+-(a z + b)) - l2 (a^2 + b^2) / 2 by Newton's method."""
    if not z:
        return 1.0, 0.0
    X = np.stack([np.asarray(z, dtype=np.float64), np.ones(len(z))], axis=1)
    t = np.asarray(y, dtype=np.float64)
    w = np.array([1.0, 0.0])
    for _ in range(100):
        p = 0.5 * (1 + np.tanh(0.5 * (X @ w)))  # sigmoid, without overflow
        grad = X.T @ (p - t) + l2 * w
        H = (X * (p * (1 - p))[:, None]).T @ X + l2 * np.eye(2)
        step = np.linalg.solve(H, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(w[0]), float(w[1])


def ece(conf: list[float], correct: list[float], bins: int = BINS) -> float:
    """Expected calibration error: sum over equal-width bins of |mean confidence - mean outcome| weighted."""
    if len(conf) == 0:
        return float("nan")
    c = np.asarray(conf, dtype=np.float64)
    b = np.minimum((c * bins).astype(int), bins - 1)
    s_hit = np.bincount(b, weights=np.asarray(correct, dtype=np.float64), minlength=bins)
    s_conf = np.bincount(b, weights=c, minlength=bins)
    return float(np.abs(s_hit - s_conf).sum() / len(c))


# -- fitting from labelled scores ----------------------------------------------------------------------
class Example(BaseModel):
    """One labelled decision: per field the final log-scores (scalar: choice -> log p; multi: option ->
    log P(yes)) and the gold value (scalar: a choice key, booleans "true"/"false"; multi: list)."""
    scores: dict[str, dict[str, float]]
    gold: dict[str, str | bool | list[str] | None]


def _scalar_data(examples: list[Example], field: str):
    logits, gold = [], []
    for ex in examples:
        sc, g = ex.scores.get(field), ex.gold.get(field)
        if sc is None or g is None:
            continue
        g = ("true" if g else "false") if isinstance(g, bool) else g
        keys = list(sc)
        if g not in keys:
            continue
        logits.append([sc[k] for k in keys])
        gold.append(keys.index(g))
    return logits, gold


def _multi_data(examples: list[Example], field: str):
    z, y = [], []
    for ex in examples:
        sc, g = ex.scores.get(field), ex.gold.get(field)
        if sc is None or g is None:
            continue
        for opt, ly in sc.items():
            ln = math.log(max(-math.expm1(ly), 1e-300))
            z.append(ly - ln)
            y.append(1 if opt in g else 0)
    return z, y


def field_points(examples: list[Example], field: str, ftype: str, fc: FieldCalibration | None = None):
    """(confidence, outcome) pairs for ECE and reliability diagrams, after applying ``fc`` if given."""
    conf, ok = [], []
    if ftype == "multi":
        z, y = _multi_data(examples, field)
        for zi, yi in zip(z, y):  # the yes/no decision's confidence, as the eval harness bins it
            p = math.exp(_log_sigmoid(fc.a * zi + fc.b if fc else zi))
            conf.append(max(p, 1 - p))
            ok.append(1.0 if (p >= 0.5) == bool(yi) else 0.0)
        return conf, ok
    logits, gold = _scalar_data(examples, field)
    for r, g in zip(logits, gold):
        t = fc.temperature if fc else 1.0
        p = [math.exp(v) for v in _log_softmax([x / t for x in r])]
        top = max(range(len(p)), key=p.__getitem__)
        conf.append(p[top])
        ok.append(1.0 if top == g else 0.0)
    return conf, ok


def fit_fields(examples: list[Example], types: dict[str, str]) -> dict[str, FieldCalibration]:
    out = {}
    for name, ftype in types.items():
        if ftype == "multi":
            a, b = fit_logistic(*_multi_data(examples, name))
            out[name] = FieldCalibration(type="multi", a=a, b=b)
        else:
            out[name] = FieldCalibration(type=ftype, temperature=fit_temperature(*_scalar_data(examples, name)))
    return out


def evaluate(examples: list[Example], types: dict[str, str], fields: dict[str, FieldCalibration] | None) -> dict:
    """Per field and pooled ECE (pooled over every point of every field)."""
    per, allc, allk = {}, [], []
    for name, ftype in types.items():
        c, k = field_points(examples, name, ftype, fields.get(name) if fields else None)
        per[name] = {"ece": ece(c, k), "n": len(c)}
        allc += c
        allk += k
    return {"ece": ece(allc, allk), "fields": per}
