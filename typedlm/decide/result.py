"""Decision results and the one finalizer every scoring path goes through.

``finish_decision`` turns per-question constrained log-scores into field results (probabilities,
alternatives, margins, legal mass, abstention), reconciles multi fields, and validates the value
(Pydantic instance or dict). Keys of ``Decision.to_dict()`` are pinned by a test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..errors import TypedLMError
from .constraints import constrained_fields
from .solver import MultiVar, ScalarVar, solve, unconstrained
from .multi import reconcile
from .plan import NONE_OF_ABOVE, Plan

TOLERANCE = 0.05  # nats: the one tolerance for batch-shape noise (batched vs one-row-at-a-time scoring)
FIELD_KEYS = ("value", "probability", "probabilities", "alternatives", "margin", "legal_mass", "reason",
              "score_source", "temperature", "calibrator", "prior", "constraint_changed", "solver_value", "given")
DECISION_KEYS = ("value", "fields", "timings", "usage", "scoring", "model", "summary")
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

    def value_dict(self) -> dict:
        return {name: f.value for name, f in self.fields.items()}

    def summary(self) -> str:
        """One line: every field's value and how its number was made."""
        return "; ".join(f.summary() for f in self.fields.values())

    def to_dict(self) -> dict:
        return {"value": self.value_dict(), "fields": {n: f.to_dict() for n, f in self.fields.items()},
                "timings": self.timings, "usage": self.usage, "scoring": self.scoring, "model": self.model,
                "summary": self.summary()}


def format_value(v: Any) -> str:
    """A field value for tables (CLI, demo)."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ", ".join(v) or "(none)"
    return str(v)


def _softmax(logs: list[float]) -> list[float]:
    m = max(logs)
    ex = [math.exp(x - m) for x in logs]
    s = sum(ex)
    return [e / s for e in ex]


def _ranked(probs: dict) -> list[tuple[str, float]]:
    return sorted(probs.items(), key=lambda kv: -kv[1])


def _abstains(f, margin: float, abstain_below: float | None) -> bool:
    """The one abstention rule: a nullable field whose margin is below the threshold."""
    return f.nullable and abstain_below is not None and margin < abstain_below


def _scalar(plan: Plan, f, q, score: QuestionScore, abstain_below: float | None, record: dict) -> FieldResult:
    keys = list(q.keys)
    probs = dict(zip(keys, _softmax(list(score.log_scores))))
    ranked = _ranked(probs)
    top, p_top = ranked[0]
    margin = p_top - (ranked[1][1] if len(ranked) > 1 else 0.0)
    value: Any = (top == "true") if f.type == "boolean" else top
    probability: float | None = p_top
    reason = None
    if top == NONE_OF_ABOVE:
        value, probability, reason = None, None, "none_of_above"
    elif _abstains(f, margin, abstain_below):
        value, probability, reason = None, None, "abstain"
    alts = [{"value": (k == "true") if f.type == "boolean" else k, "probability": p} for k, p in ranked[1:4]]
    return FieldResult(f.name, f.type, value, probability, probs, alts, margin, math.exp(score.log_legal_mass),
                       score.log_legal_mass, reason, dict(zip(keys, score.log_scores)), **record)


def _multi(plan: Plan, f, qs: list[int], scores: list[QuestionScore], abstain_below: float | None,
           record: dict) -> FieldResult:
    p_yes, log_yes, log_mass = {}, {}, 0.0
    count_probs: dict = {}
    for i in qs:
        q, s = plan.questions[i], scores[i]
        log_mass += s.log_legal_mass
        pr = _softmax(list(s.log_scores))
        if q.kind == "option":
            p_yes[q.option] = pr[0]
            log_yes[q.option] = s.log_scores[0]  # constrained: already normalized over true/false
        else:
            count_probs = dict(zip(q.keys, pr))
    selected = reconcile(list(p_yes), p_yes, count_probs)
    margin = min(abs(2 * p - 1) for p in p_yes.values())
    value: Any = selected
    reason = None
    if _abstains(f, margin, abstain_below):
        value, reason = None, "abstain"
    close = sorted(p_yes.items(), key=lambda kv: abs(kv[1] - 0.5))[:3]
    alts = [{"value": k, "probability": p} for k, p in close]
    return FieldResult(f.name, f.type, value, None, p_yes, alts, margin, math.exp(log_mass), log_mass,
                       reason, log_yes, count_probs, **record)


def finish_decision(plan: Plan, scores: list[QuestionScore], *, timings: dict, usage: dict, model: str,
                    abstain_below_margin: float | None = None, records: dict | None = None,
                    fixed: dict | None = None) -> Decision:
    """The one finalizer: question scores -> Decision (validated value). ``scores`` are final (prior
    correction and calibration already applied); ``records`` gives each field's semantics record
    (score_source, temperature, calibrator, prior, given); ``fixed``: see :func:`field_results`."""
    fields = field_results(plan, scores, abstain_below_margin=abstain_below_margin, records=records, fixed=fixed)
    value = _validate(plan, {n: r.value for n, r in fields.items()})
    return Decision(value=value, fields=fields, timings=timings, usage=usage, scoring=plan.scoring, model=model)


def field_results(plan: Plan, scores: list[QuestionScore], *, abstain_below_margin: float | None = None,
                  records: dict | None = None, fixed: dict | None = None) -> dict[str, FieldResult]:
    """Every field's result. Fields under a constraint are set jointly by the exact solver
    (:mod:`typedlm.decide.constraints`), which keeps the constrained fields in ``fixed`` (name -> candidate
    key or selection: decided in an earlier dependency wave, see :func:`pins`) at their values. A constrained
    field abstains on the same rule as any other, after the solve: its value is hidden (``None``, a multi
    field as a whole, never a partial set) and the solver's choice stays in ``solver_value``. So the shown
    values are always the solver's joint assignment with some fields hidden, and that assignment satisfies
    every constraint: abstaining can never show a violating set (``min_selected`` included)."""
    by_field: dict[str, list[int]] = {}
    for i, q in enumerate(plan.questions):
        by_field.setdefault(q.field, []).append(i)
    records = records or {}
    bound = constrained_fields(plan.schema)
    fields: dict[str, FieldResult] = {}
    for f in plan.schema.fields:
        qs = by_field[f.name]
        abstain = None if f.name in bound else abstain_below_margin
        rec = records.get(f.name, {})
        if f.type != "multi":
            fields[f.name] = _scalar(plan, f, plan.questions[qs[0]], scores[qs[0]], abstain, rec)
        else:
            fields[f.name] = _multi(plan, f, qs, scores, abstain, rec)
    if bound:
        fields.update(_solve_constraints(plan, fields, bound, abstain_below_margin, fixed or {}))
    return fields


def pins(plan: Plan, fields: dict[str, FieldResult], names) -> dict:
    """The solver's choices (candidate keys / selections) of the constrained fields among ``names``: what a
    later dependency wave keeps while it decides the fields conditioned on them."""
    bound = constrained_fields(plan.schema)
    out = {}
    for n in names:
        if n in bound:
            v, ftype = fields[n].solver_value, plan.schema[n].type
            out[n] = NONE_OF_ABOVE if v is None and ftype == "enum" else \
                ("true" if v else "false") if ftype == "boolean" else v
    return out


def _log(p: float) -> float:
    return math.log(max(p, 1e-300))  # finite: a probability that rounded to 0 is very unlikely, not impossible


def _solve_constraints(plan: Plan, fields: dict[str, FieldResult], bound: set[str], abstain_below: float | None,
                       fixed: dict) -> dict[str, FieldResult]:
    """Constrained fields -> the maximum-probability joint assignment satisfying every constraint (keeping
    ``fixed``), then the abstention rule."""
    scalars, multis = [], []
    for name in sorted(bound):
        f, r = plan.schema[name], fields[name]
        if f.type == "multi":
            opts = list(r.probabilities)
            counts = [_log(r.count_probabilities[k]) for k in sorted(r.count_probabilities, key=int)] \
                if r.count_probabilities else None
            multis.append(MultiVar(name, opts, [_log(r.probabilities[o]) for o in opts],
                                   [_log(1 - r.probabilities[o]) for o in opts], counts, f.min_selected,
                                   f.max_selected, f.exclusive, f.requires))
        else:
            vals = list(r.probabilities)
            scalars.append(ScalarVar(name, vals, [_log(r.probabilities[v]) for v in vals]))
    chosen = solve(scalars, multis, plan.schema.constraints, fixed)
    free = unconstrained(scalars, multis)
    out = {}
    for name, v in chosen.items():
        r, f = fields[name], plan.schema[name]
        changed = v != free[name]
        hide = _abstains(f, r.margin, abstain_below)
        if r.type == "multi":
            out[name] = replace(r, value=None if hide else v, reason="abstain" if hide else None,
                                constraint_changed=changed, solver_value=v)
            continue
        value: Any = (v == "true") if r.type == "boolean" else v
        solver_value = value
        probability: float | None = r.probabilities[v]
        reason = None
        if v == NONE_OF_ABOVE:
            value, probability, reason, solver_value = None, None, "none_of_above", None
        elif hide:
            value, probability, reason = None, None, "abstain"
        alts = [{"value": (k == "true") if r.type == "boolean" else k, "probability": p}
                for k, p in _ranked(r.probabilities) if k != v][:3]
        out[name] = replace(r, value=value, probability=probability, reason=reason, alternatives=alts,
                            constraint_changed=changed, solver_value=solver_value)
    return out


def _validate(plan: Plan, values: dict) -> Any:
    model = plan.schema.model
    if model is None:
        return dict(values)
    try:
        return model.model_validate(values)
    except Exception as e:  # pydantic ValidationError: the model's own validators refused the decision
        raise TypedLMError(f"decision does not validate as {model.__name__}: {e}") from e
