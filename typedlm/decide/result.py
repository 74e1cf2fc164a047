"""Decision results and the one finalizer every scoring path goes through.

``field_results`` turns per-question final log-scores and the constraint step's choices
(:mod:`typedlm.decide.constraints.joint`) into field results (probabilities, alternatives, margins, legal mass,
abstention); ``finish_decision`` validates the value (Pydantic instance or dict). Keys of
``Decision.to_dict()`` are pinned by a test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import TypedLMError
from .constraints.parse import constrained_fields
from .logmath import softmax
from .plan import NONE_OF_ABOVE, Plan

TOLERANCE = 0.05  # nats: the one tolerance for batch-shape noise (batched vs one-row-at-a-time scoring)
FIELD_KEYS = ("value", "probability", "probabilities", "alternatives", "margin", "legal_mass", "reason",
              "score_source", "temperature", "calibrator", "prior", "constraint_changed", "solver_value", "given")
DECISION_KEYS = ("value", "fields", "timings", "usage", "scoring", "model", "prompt", "summary")
SCORE_SOURCES = ("batched", "rescored_one_row", "dependency")
RECORD_KEYS = ("score_source", "temperature", "calibrator", "prior", "constraint_changed", "solver_value",
               "given")  # the semantics record


@dataclass(frozen=True)
class QuestionScore:
    """What scoring produced for one question: constrained and full-vocabulary log-scores per candidate."""
    log_scores: tuple[float, ...]
    log_legal_mass: float


@dataclass(frozen=True)
class FieldResult:
    name: str
    type: str
    value: Any  # str | bool | list[str] | None
    probability: float | None  # scalar fields: the value's probability (None for multi and abstentions)
    probabilities: dict  # scalar: choice -> p (sums to 1; booleans keyed "true"/"false"); multi: option -> P(yes)
    alternatives: list  # up to 3: [{"value", "probability"}]
    margin: float  # scalar: p(top1) - p(top2); multi: min over options of |P(yes) - P(no)|
    legal_mass: float  # probability of the allowed continuations at the branch points (multi: product)
    log_legal_mass: float
    reason: str | None  # None | "none_of_above" | "abstain"
    log_scores: dict  # scalar: choice -> constrained log-probability; multi: option -> log P(yes)
    count_probabilities: dict | None = None  # multi only: "0".."N" -> p
    # how the numbers were made (the semantics record)
    score_source: str = "batched"  # SCORE_SOURCES: first batched pass / one-row rescore / dependency pass
    temperature: float | None = None  # calibration temperature applied (scalar fields); None: none
    calibrator: str | None = None  # id of the calibration bundle applied, or None
    prior: str = "none"  # prior correction applied: "none" | "neutral" | "batch"
    constraint_changed: bool = False  # the constraint solver changed the unconstrained winner
    solver_value: Any = None  # constrained fields: the solver's choice (the value unless the field abstained)
    given: dict | None = None  # dependency fields: the parents' values the field was scored under

    def to_dict(self) -> dict:
        return {"value": self.value, "probability": self.probability, "probabilities": self.probabilities,
                "alternatives": self.alternatives, "margin": self.margin, "legal_mass": self.legal_mass,
                "reason": self.reason, "score_source": self.score_source, "temperature": self.temperature,
                "calibrator": self.calibrator, "prior": self.prior, "constraint_changed": self.constraint_changed,
                "solver_value": self.solver_value, "given": self.given}

    def summary(self) -> str:
        how = [self.score_source]
        if self.prior != "none":
            how.append(f"prior {self.prior}")
        if self.calibrator:
            how.append(f"calibrated {self.calibrator}" + (f" T={self.temperature:.2f}" if self.temperature else ""))
        if self.given:
            how.append("given " + ", ".join(f"{k}={format_value(v)}" for k, v in self.given.items()))
        if self.constraint_changed:
            how.append("changed by constraints")
        if self.reason == "abstain" and self.solver_value is not None:
            how.append(f"abstain, solver chose {format_value(self.solver_value)}")
        elif self.reason:
            how.append(self.reason)
        p = "" if self.probability is None else f" p={self.probability:.2f}"
        return f"{self.name}={format_value(self.value)}{p} ({', '.join(how)})"


@dataclass
class Decision:
    value: Any  # an instance of the schema's Pydantic model, or a dict
    fields: dict[str, FieldResult]
    timings: dict  # seconds: compile, prefill, scoring, total
    usage: dict  # prompt_tokens, scored_tokens, rows, passes, oom_retries, chunk_rows, packing
    scoring: str
    model: str
    prompt: dict  # version, hash, examples (count), examples_hash: the prompt the numbers were scored on

    def value_dict(self) -> dict:
        return {name: f.value for name, f in self.fields.items()}

    def summary(self) -> str:
        """One line: every field's value and how its number was made."""
        return "; ".join(f.summary() for f in self.fields.values())

    def to_dict(self) -> dict:
        return {"value": self.value_dict(), "fields": {n: f.to_dict() for n, f in self.fields.items()},
                "timings": self.timings, "usage": self.usage, "scoring": self.scoring, "model": self.model,
                "prompt": self.prompt, "summary": self.summary()}


def format_value(v: Any) -> str:
    """A field value for tables (CLI, demo)."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ", ".join(v) or "(none)"
    return str(v)


def _ranked(probs: dict) -> list[tuple[str, float]]:
    return sorted(probs.items(), key=lambda kv: -kv[1])


def _abstains(f, margin: float, abstain_below: float | None) -> bool:
    """The one abstention rule: a nullable field whose margin is below the threshold."""
    return f.nullable and abstain_below is not None and margin < abstain_below


def decode(f, key: Any) -> Any:
    """A candidate key as the field's value: the one place "true" / "false" become booleans and "none of
    the above" becomes ``None`` (multi selections pass through)."""
    if f.type == "boolean":
        return key == "true"
    return None if key == NONE_OF_ABOVE else key


def _scalar(f, q, score: QuestionScore, key: str, abstain_below: float | None, record: dict) -> FieldResult:
    keys = list(q.keys)
    probs = dict(zip(keys, softmax(list(score.log_scores))))
    ranked = _ranked(probs)
    margin = ranked[0][1] - (ranked[1][1] if len(ranked) > 1 else 0.0)
    value, probability, reason = decode(f, key), probs[key], None
    if key == NONE_OF_ABOVE:
        probability, reason = None, "none_of_above"
    elif _abstains(f, margin, abstain_below):
        value, probability, reason = None, None, "abstain"
    alts = [{"value": decode(f, k), "probability": p} for k, p in ranked if k != key][:3]
    return FieldResult(f.name, f.type, value, probability, probs, alts, margin, math.exp(score.log_legal_mass),
                       score.log_legal_mass, reason, dict(zip(keys, score.log_scores)), **record)


def _multi(plan: Plan, f, qs: list[int], scores: list[QuestionScore], selected: list[str],
           abstain_below: float | None, record: dict) -> FieldResult:
    p_yes, log_yes, log_mass = {}, {}, 0.0
    count_probs: dict = {}
    for i in qs:
        q, s = plan.questions[i], scores[i]
        log_mass += s.log_legal_mass
        pr = softmax(list(s.log_scores))
        if q.kind == "option":
            p_yes[q.option] = pr[0]
            log_yes[q.option] = s.log_scores[0]  # constrained: already normalized over true/false
        else:
            count_probs = dict(zip(q.keys, pr))
    margin = min(abs(2 * p - 1) for p in p_yes.values())
    value: Any = list(selected)
    reason = None
    if _abstains(f, margin, abstain_below):
        value, reason = None, "abstain"
    close = sorted(p_yes.items(), key=lambda kv: abs(kv[1] - 0.5))[:3]
    alts = [{"value": k, "probability": p} for k, p in close]
    return FieldResult(f.name, f.type, value, None, p_yes, alts, margin, math.exp(log_mass), log_mass,
                       reason, log_yes, count_probs, **record)


def finish_decision(plan: Plan, fields: dict[str, FieldResult], *, timings: dict, usage: dict, model: str,
                    prompt: dict) -> Decision:
    """The one finalizer: field results -> Decision with the value validated (Pydantic instance or dict);
    ``prompt``: ``prompt.prompt_record(plan)``."""
    value = _validate(plan, {n: r.value for n, r in fields.items()})
    return Decision(value=value, fields=fields, timings=timings, usage=usage, scoring=plan.scoring, model=model,
                    prompt=prompt)


def field_results(plan: Plan, scores: list[QuestionScore], chosen: dict, free: dict, *,
                  abstain_below_margin: float | None = None, records: dict | None = None) -> dict[str, FieldResult]:
    """Every field's result from its final scores and the constraint step's choice (``joint.solve_fields``).
    Every field abstains on the same rule (nullable, margin below the threshold), constrained or not; an
    abstaining field hides its value (``None``, a multi field as a whole, never a partial set) and a
    constrained field keeps the solver's choice in ``solver_value``. So the shown values are always the
    solver's joint assignment with some fields hidden, which satisfies every constraint."""
    by_field: dict[str, list[int]] = {}
    for i, q in enumerate(plan.questions):
        by_field.setdefault(q.field, []).append(i)
    records = records or {}
    bound = constrained_fields(plan.schema)
    fields: dict[str, FieldResult] = {}
    for f in plan.schema.fields:
        qs, key = by_field[f.name], chosen[f.name]
        rec = dict(records.get(f.name, {}))
        if f.name in bound:
            rec.update(constraint_changed=key != free[f.name], solver_value=decode(f, key))
        if f.type != "multi":
            fields[f.name] = _scalar(f, plan.questions[qs[0]], scores[qs[0]], key, abstain_below_margin, rec)
        else:
            fields[f.name] = _multi(plan, f, qs, scores, key, abstain_below_margin, rec)
    return fields


def _validate(plan: Plan, values: dict) -> Any:
    model = plan.schema.model
    if model is None:
        return dict(values)
    try:
        return model.model_validate(values)
    except Exception as e:  # pydantic ValidationError: the model's own validators refused the decision
        raise TypedLMError(f"decision does not validate as {model.__name__}: {e}") from e
