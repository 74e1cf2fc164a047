"""Each field's decision rule — its prior mode, calibrator and (multi fields) set rule — and applying it.

A field's rule comes from the calibration bundle when the bundle has the field (``typedlm calibrate`` chose
it by cross-validation on the calibration split: :mod:`typedlm.decide.calibrate.rulefit`), else from the options:
``DecideOptions.prior`` (``auto``: per field type, :data:`typedlm.decide.prior.AUTO`) and ``DecideOptions.set_rule`` (the set rule ``cardinality`` with
:func:`typedlm.decide.cardinality.default_prior`). ``decide`` / ``decide_many`` (and so eval, the server and
the playground) and the offline variants of :mod:`typedlm.decide.calibrate.collect` all go through :func:`rules_for`,
:func:`final_scores` and :func:`count_terms`, so a bundle means the same everywhere.

Calibrators are applied by candidate *name*: a bundle fitted on one candidate order applies to any other
(``--flip`` permutations included).
"""

from __future__ import annotations

from dataclasses import dataclass

from .calibrate.bundle import FieldCalibration
from .cardinality import default_prior
from .logmath import log_sigmoid
from .prior import PriorError, adjust_fields, check_mode, field_mode
from .result import QuestionScore


@dataclass(frozen=True)
class Rule:
    prior: str
    calibration: FieldCalibration | None
    set_rule: str | None  # multi fields: threshold | count | cardinality
    threshold: float  # multi fields: t, nats of log-odds
    cardinality: tuple[float, ...] | None  # set rule cardinality: log p(|S| = k), k = 0..N


def rules_for(plan, options) -> dict[str, Rule]:
    """field -> its Rule under ``options`` (a DecideOptions; its bundle's fields override the defaults)."""
    bundle = options.calibration
    out = {}
    for f in plan.schema.fields:
        fc = bundle.fields.get(f.name) if bundle is not None else None
        multi = f.type == "multi"
        rule = (fc.set_rule if fc is not None else options.set_rule) if multi else None
        card = None
        if rule == "cardinality":
            card = tuple(fc.cardinality if fc is not None and fc.cardinality else default_prior(len(f.values)))
        out[f.name] = Rule(fc.prior if fc is not None else field_mode(options.prior, f.type), fc, rule,
                           (fc.threshold or 0.0) if fc is not None else 0.0, card)
    return out


def prior_modes(rules: dict[str, Rule]) -> dict[str, str]:
    return {name: r.prior for name, r in rules.items()}


def check_contexts(rules: dict[str, Rule], n_contexts: int) -> None:
    """Every prior mode the rules use can run on ``n_contexts`` contexts (``batch``: at least two)."""
    for name, r in rules.items():
        try:
            check_mode(r.prior, n_contexts)
        except PriorError as e:
            raise PriorError(f"field '{name}' ({'calibration bundle' if r.calibration else 'options'}): {e}") from e


def final_scores(plan, scores: list[QuestionScore], rules: dict[str, Rule], logs: dict) -> list[QuestionScore]:
    """Raw question scores -> the scores the constraint step reads: each field's prior (``logs``: mode ->
    per-question log prior over ``plan``'s questions), then its calibrator."""
    out = adjust_fields(plan, scores, prior_modes(rules), logs)
    return calibrated(plan, out, rules)


def calibrated(plan, scores: list[QuestionScore], rules: dict[str, Rule]) -> list[QuestionScore]:
    """Each field's calibrator applied (by candidate name; a count question by its field's count map, if any);
    uncalibrated fields as given."""
    out = list(scores)
    for qi, q in enumerate(plan.questions):
        fc = rules[q.field].calibration
        if fc is None:
            continue
        s = scores[qi]
        if q.kind == "count":
            out[qi] = QuestionScore(tuple(fc.count_log_probs(s.log_scores)), s.log_legal_mass)
        elif fc.type == "multi":
            z = fc.yes_logit(q.option, *s.log_scores)
            out[qi] = QuestionScore((log_sigmoid(z), log_sigmoid(-z)), s.log_legal_mass)
        else:
            out[qi] = QuestionScore(tuple(fc.log_probs_by_name(q.keys, s.log_scores)), s.log_legal_mass)
    return out


def count_terms(rules: dict[str, Rule], count_logs: dict[str, list[float]]) -> dict[str, list[float] | None]:
    """Multi field -> its set-size term log p(k) for the solver under its set rule (``count_logs``: the count
    question's log-probabilities)."""
    out = {}
    for name, r in rules.items():
        if r.set_rule == "count":
            out[name] = count_logs.get(name)
        elif r.set_rule == "cardinality":
            out[name] = list(r.cardinality)
        elif r.set_rule == "threshold":
            out[name] = None
    return out


def thresholds(rules: dict[str, Rule]) -> dict[str, float]:
    return {name: r.threshold for name, r in rules.items() if r.set_rule is not None}
