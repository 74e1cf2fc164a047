"""``DecideOptions``: every setting that changes what a decision says, in one frozen, validated object.

``decide``, ``decide_many``, the ``/v1/decide`` body (its request model extends this one), ``typedlm decide``
and ``typedlm eval`` all take it, so a setting is named, typed and checked in exactly one place. Execution
knobs that leave the numbers unchanged (a scoring pass's memory ``budget_bytes``, ``max_rows``) are not
options: they are arguments of the run (batched = one-row scoring within ``TOLERANCE``).

What can only be checked against a model and a plan (a calibration bundle's model / prompt / scoring /
candidates, ``prior="batch"`` — the option's or a bundle field's — with fewer than two contexts) is checked by ``api.prepare`` before any model work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import TypedLMError
from .calibrate.bundle import CalibrationBundle, load_bundle
from .cardinality import DEFAULT_SET_RULE
from .orders import DEFAULT_ORDER
from .plan import DEFAULT_SCORING
from .prior import DEFAULT_PRIOR
from .passes import DEFAULT_PACKING


FLAGS = {"scoring": "--scoring", "allow_none_of_above": "--none-of-above", "abstain_below_margin": "--abstain-below",
         "prior": "--prior", "set_rule": "--set-rule", "calibration": "--calibration", "packing": "--packing",
         "order": "--order"}  # CLI names of the options


class OptionsError(TypedLMError):
    """A decide option has a value it cannot take (the message names the option)."""


class DecideOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    scoring: Literal["labels", "slots"] = DEFAULT_SCORING
    allow_none_of_above: bool = False  # enum fields also offer "none of the above"
    abstain_below_margin: float | None = Field(default=None, ge=0.0, le=1.0)  # nullable fields abstain below it
    prior: Literal["auto", "none", "neutral", "batch"] = DEFAULT_PRIOR  # auto: per field type (prior.AUTO);
    # "batch": from the call's own contexts (>= 2)
    set_rule: Literal["threshold", "count", "cardinality"] = DEFAULT_SET_RULE  # multi fields (decide.cardinality)
    calibration: CalibrationBundle | None = None  # `typedlm calibrate`: per-field rules, overriding prior/set_rule
    packing: Literal["auto", "packed", "expand", "fused"] = DEFAULT_PACKING
    order: Literal["given", "averaged"] = DEFAULT_ORDER  # "averaged": two choice orders scored, averaged (orders.py)

    @classmethod
    def from_flags(cls, **given) -> "DecideOptions":
        """From CLI flags (``None``: the option's default); errors name the flag (``--abstain-below: ...``)."""
        return cls.make(names=FLAGS, **{k: v for k, v in given.items() if v is not None})

    @classmethod
    def make(cls, options: "DecideOptions | None" = None, *, names: dict | None = None,
             **overrides) -> "DecideOptions":
        """``options`` with ``overrides`` applied (keyword arguments of ``decide``); ``calibration`` may be a
        bundle, its dict, its JSON text or a path. Raises :class:`OptionsError` naming the bad option."""
        if options is not None and not isinstance(options, DecideOptions):
            raise OptionsError(f"options must be a DecideOptions, got {type(options).__name__}")
        if not overrides and options is not None:
            return options
        values = {**(dict(options) if options is not None else {}), **overrides}
        cal = values.get("calibration")
        if isinstance(cal, (str, bytes, Path)):
            values["calibration"] = load_bundle(cal)
        try:
            return cls(**values)
        except ValidationError as e:
            def where(loc) -> str:
                key = ".".join(str(p) for p in loc) or "options"
                return (names or {}).get(key, key)

            raise OptionsError(("" if names else "bad decide option: ") + "; ".join(
                f"{where(err['loc'])}: {err['msg']}" for err in e.errors())) from e
