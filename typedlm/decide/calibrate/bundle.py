"""Calibration with labels: a typed bundle, applying it to question scores, ECE.

A bundle holds one :class:`FieldCalibration` per field, of a recorded *kind*:

| kind | fields | calibrated scores |
|---|---|---|
| ``temperature`` | boolean / enum | ``log p / T`` |
| ``bias`` | boolean / enum | ``log p / T + b_c`` (temperature + a bias per choice) |
| ``vector`` | boolean / enum | ``s_c log p_c + b_c`` (vector scaling) |
| ``matrix`` | boolean / enum | ``W log p + b`` (matrix scaling, Guo et al. 2017) |
| ``logistic`` | multi | ``P(yes) = sigmoid(a (log P(yes) - log P(no)) + b)``, pooled over the field's options; plus the field's decision ``threshold`` (nats of log-odds, :mod:`typedlm.decide.constraints.joint`) |
| ``vector`` | multi | ``P(yes_o) = sigmoid(s_o (log P(yes_o) - log P(no_o)) + b_o)``, one scale and bias per option (shrunk towards the pooled ``logistic``), and the ``threshold`` |

A multi field whose set rule is ``count`` also calibrates its count question: ``count_scale`` / ``count_bias``
(vector scaling of the count's log-probabilities over sizes 0..N, fitted against the gold set sizes), so the
size term of the set rule is a calibrated p(|S| = k | text).

then renormalized over the choices (scalar kinds). Log-scores enter clipped at :data:`LOG_FLOOR` so a
near-zero probability cannot dominate a linear map. Each field's entry is its whole *decision rule*: the
``prior`` mode its scores are corrected with before calibration, the calibrator, and for multi fields the
``set_rule`` (:mod:`typedlm.decide.cardinality`) with its fitted set-size ``cardinality``. Parameters per
choice are stored with their ``choices`` and applied by name, so a bundle applies to any candidate order.
The rules are chosen by cross-validation on the calibration split (:mod:`typedlm.decide.calibrate.rulefit`) and
applied by :mod:`typedlm.decide.rules`.

:class:`CalibrationBundle` carries what it was made for (model fingerprint, prompt version, scoring
mode, candidate ``order`` mode); :meth:`CalibrationBundle.check` refuses any mismatch with a :class:`CalibrationMismatch` naming it. ECE as the eval harness computes it (:mod:`typedlm.eval.metrics`):
15 equal-width bins; scalar fields on the top-1 confidence, multi fields on each option's yes/no decision
(confidence max(P(yes), P(no))), pooled over options. :func:`ece_floor` is the ECE a perfectly calibrated
predictor with the same confidences would show on as many cases (the estimator's own bias).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from ...errors import TypedLMError
from ...grammar.spec import canonical_json
from ..logmath import log_softmax

FORMAT = "typedlm-calibration/4"
BINS = 15
LOG_FLOOR = -50.0  # log-scores below this enter the scalar calibrators as this
SCALAR_KINDS = ("temperature", "bias", "vector", "matrix")
MULTI_KINDS = ("logistic", "vector")


class CalibrationMismatch(TypedLMError):
    """A calibration bundle made for another model, prompt version, scoring mode or schema."""


class FieldCalibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["boolean", "enum", "multi"]
    kind: Literal["temperature", "bias", "vector", "matrix", "logistic"]
    choices: list[str] | None = None  # bias / vector / matrix (multi vector: the options): the order of the parameters
    temperature: float | None = None  # temperature, bias
    scale: list[float] | None = None  # vector
    weights: list[list[float]] | None = None  # matrix: row c = weights of the log-scores for choice c
    bias: list[float] | None = None  # bias, vector, matrix
    a: float | None = None  # logistic: sigmoid(a * (log yes - log no) + b)
    b: float | None = None
    threshold: float | None = None  # logistic (optional, 0): the multi decision rule's threshold t (log-odds, nats)
    prior: Literal["none", "neutral", "batch"] = "neutral"  # the prior mode the scores are corrected with first
    set_rule: Literal["threshold", "count", "cardinality"] | None = None  # multi fields (required there)
    cardinality: list[float] | None = None  # set rule cardinality: log p(|S| = k), k = 0..N (else the default)
    count_scale: list[float] | None = None  # set rule count: the count question's vector scaling, k = 0..N
    count_bias: list[float] | None = None

    @model_validator(mode="after")
    def _parameters(self):
        need = {"temperature": ("temperature",), "bias": ("choices", "temperature", "bias"),
                "vector": ("choices", "scale", "bias"), "matrix": ("choices", "weights", "bias"),
                "logistic": ("a", "b")}[self.kind]
        if self.kind not in (MULTI_KINDS if self.type == "multi" else SCALAR_KINDS):
            raise ValueError(f"kind {self.kind!r} does not calibrate a {self.type} field")
        given = {k for k in ("choices", "temperature", "scale", "weights", "bias", "a", "b", "threshold")
                 if getattr(self, k) is not None}
        if self.type == "multi":
            given.discard("threshold")  # optional: 0 when absent
        if given != set(need):
            raise ValueError(f"kind {self.kind!r} takes {', '.join(need)}; got {', '.join(sorted(given)) or 'nothing'}")
        if (self.set_rule is None) == (self.type == "multi"):
            raise ValueError("a multi field needs a set_rule; a scalar field takes none")
        if self.cardinality is not None and self.set_rule != "cardinality":
            raise ValueError("cardinality is the set_rule 'cardinality''s parameter")
        if (self.count_scale is None) != (self.count_bias is None) or (
                self.count_scale is not None and (self.set_rule != "count" or len(self.count_scale) != len(self.count_bias))):
            raise ValueError("count_scale and count_bias (one entry per set size) go together, with the set_rule 'count'")
        if self.temperature is not None and not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.choices is not None:
            k = len(self.choices)
            vecs = [self.bias] + ([self.scale] if self.scale else []) + (self.weights or [])
            if any(len(v) != k for v in vecs) or (self.weights is not None and len(self.weights) != k):
                raise ValueError(f"kind {self.kind!r}: every parameter needs one entry per choice ({k})")
        return self

    def log_probs(self, logs: Sequence[float]) -> list[float]:
        """A scalar field's calibrated log-probabilities (candidates in the order the bundle was fitted on)."""
        x = np.maximum(np.asarray(logs, dtype=np.float64), LOG_FLOOR)
        if self.kind == "temperature":
            z = x / self.temperature
        elif self.kind == "bias":
            z = x / self.temperature + np.asarray(self.bias)
        elif self.kind == "vector":
            z = np.asarray(self.scale) * x + np.asarray(self.bias)
        else:
            z = np.asarray(self.weights) @ x + np.asarray(self.bias)
        return log_softmax(z.tolist())

    def log_probs_by_name(self, keys: Sequence[str], logs: Sequence[float]) -> list[float]:
        """:meth:`log_probs` for candidates ``keys`` in any order: per-choice parameters follow their choice."""
        if self.choices is None or list(keys) == self.choices:
            return self.log_probs(logs)
        at = [list(keys).index(c) for c in self.choices]
        got = self.log_probs([logs[i] for i in at])
        out = [0.0] * len(keys)
        for j, i in enumerate(at):
            out[i] = got[j]
        return out

    def count_log_probs(self, logs: Sequence[float]) -> list[float]:
        """A multi field's count-question log-probabilities (sizes 0..N), calibrated when the rule has a count map."""
        if self.count_scale is None:
            return list(logs)
        x = np.maximum(np.asarray(log_softmax(list(logs)), dtype=np.float64), LOG_FLOOR)
        return log_softmax((np.asarray(self.count_scale) * x + np.asarray(self.count_bias)).tolist())

    def yes_logit(self, option: str, log_yes: float, log_no: float) -> float:
        """A multi field's calibrated log-odds of ``option`` (kind ``vector``: that option's own scale and bias)."""
        if self.kind == "vector":
            i = self.choices.index(option)
            return self.scale[i] * (log_yes - log_no) + self.bias[i]
        return self.a * (log_yes - log_no) + self.b


class CalibrationBundle(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Literal["typedlm-calibration/4"] = FORMAT
    model: str
    model_hash: str
    prompt_version: str
    scoring: str
    order: Literal["given", "averaged"] = "given"  # the decide option ``order`` its scores were made with
    fields: dict[str, FieldCalibration]
    fit: dict = {}  # informational: data, sizes, each field's chosen rule with its CV score and the candidates

    @property
    def id(self) -> str:
        body = canonical_json({k: v for k, v in self.model_dump().items() if k != "fit"})
        return "cal-" + hashlib.sha256(body.encode()).hexdigest()[:10]

    def check(self, *, model_hash: str, prompt_version: str, scoring: str, plan, order: str) -> None:
        for what, mine, theirs in (("model", self.model_hash, model_hash),
                                   ("prompt version", self.prompt_version, prompt_version),
                                   ("scoring mode", self.scoring, scoring), ("order", self.order, order)):
            if mine != theirs:
                raise CalibrationMismatch(f"calibration bundle {self.id} was made for {what} {mine!r}, "
                                          f"this decision uses {theirs!r}: refit it with `typedlm calibrate`")
        keys = {q.field: list(q.keys) for q in plan.questions if q.kind == "scalar"}
        for q in plan.questions:
            if q.kind == "option":
                keys.setdefault(q.field, []).append(q.option)
        for name, fc in self.fields.items():
            if name not in plan.schema.names:
                raise CalibrationMismatch(f"calibration bundle {self.id} calibrates field {name!r}, "
                                          f"which the schema does not have")
            if plan.schema[name].type != fc.type:
                raise CalibrationMismatch(f"calibration bundle {self.id}: field {name!r} was {fc.type}, "
                                          f"the schema's is {plan.schema[name].type}")
            if fc.choices is not None and sorted(fc.choices) != sorted(keys[name]):
                raise CalibrationMismatch(f"calibration bundle {self.id}: field {name!r} was fitted on the "
                                          f"candidates {fc.choices}, this decision scores {keys[name]}")
            n = len(plan.schema[name].values)
            if (fc.cardinality is not None and len(fc.cardinality) != n + 1) or \
                    (fc.count_scale is not None and len(fc.count_scale) != n + 1):
                raise CalibrationMismatch(f"calibration bundle {self.id}: field {name!r} has a set-size prior "
                                          f"over 0..{len(fc.cardinality) - 1}, the field has {n} options")

    def record(self, field: str) -> dict:
        fc = self.fields.get(field)
        if fc is None:
            return {}
        return {"calibrator": self.id, "temperature": fc.temperature}


def load_bundle(obj) -> CalibrationBundle:
    """A bundle from a CalibrationBundle, a dict, a JSON string or a path to a JSON file."""
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
def ece(conf: list[float], correct: list[float], bins: int = BINS) -> float:
    """Expected calibration error: sum over equal-width bins of |mean confidence - mean outcome| weighted."""
    if len(conf) == 0:
        return float("nan")
    c = np.asarray(conf, dtype=np.float64)
    b = np.minimum((c * bins).astype(int), bins - 1)
    s_hit = np.bincount(b, weights=np.asarray(correct, dtype=np.float64), minlength=bins)
    s_conf = np.bincount(b, weights=c, minlength=bins)
    return float(np.abs(s_hit - s_conf).sum() / len(c))




def ece_floor(conf, bins: int = BINS, draws: int = 200, seed: int = 0) -> float:
    """Mean ECE of a perfectly calibrated predictor with these confidences on as many cases (outcomes drawn
    with probability = confidence): the bias of the estimator itself; a measured ECE near it is noise."""
    c = np.asarray(conf, dtype=np.float64)
    if len(c) == 0:
        return float("nan")
    rng = np.random.default_rng(seed)
    return float(np.mean([ece(c, rng.random(len(c)) < c, bins) for _ in range(draws)]))
