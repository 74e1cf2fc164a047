"""Request bodies of ``POST /v1/decide`` (the options of :class:`typedlm.decide.options.DecideOptions` plus
what to decide) and ``POST /v1/systemone`` (the TypeSafe System One wire shape: ``choice`` / ``noul`` /
``score`` questions about a state)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...decide.options import DecideOptions
from ...decide.plan import DEFAULT_SCORING

MAX_CONTEXTS = 64  # contexts in one /v1/decide request


class DecideRequest(DecideOptions):
    """The options (:class:`DecideOptions`: scoring, prior, calibration as a bundle object, ...) plus what to
    decide. ``prior="batch"`` takes the prior from the request's own contexts (>= 2)."""
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    schema_: dict = Field(alias="schema")
    context: str | None = None
    contexts: list[str] | None = Field(default=None, min_length=1, max_length=MAX_CONTEXTS)  # -> a list of results
    model: str | None = None  # informational: the server has one engine

    def options(self) -> DecideOptions:
        return DecideOptions(**{k: getattr(self, k) for k in DecideOptions.model_fields})


class SystemOneQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["choice", "noul", "score"]
    instructions: str
    criteria: list[str] | dict[str, str] | None = None


class SystemOneRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: Any
    questions: dict[str, SystemOneQuestion]
    model: str | None = None
    scoring: Literal["labels", "slots"] = DEFAULT_SCORING
