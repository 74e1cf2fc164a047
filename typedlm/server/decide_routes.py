"""HTTP routes: ``POST /v1/decide`` (Decision JSON) and ``POST /v1/systemone`` (TypeSafe System One wire
shape). The server includes ``router``; handlers take the engine from ``request.app.state.typedlm`` and
run decide work through its ``run_stepwise`` (forwards interleaved with decode steps) (see :mod:`typedlm.server.state`). The decision logic lives in :mod:`typedlm.decide`."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from ..decide.api import prepare, run
from ..decide.calibrate.bundle import CalibrationMismatch
from ..decide.options import DecideOptions
from ..decide.prior import PriorError
from ..decide.plan import DEFAULT_SCORING
from ..decide.schema import DecisionSchema, SchemaError
from ..errors import TypedLMError
from ..grammar.spec import canonical_json
from .errors import APIError

router = APIRouter()
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


@router.post("/v1/decide")
async def v1_decide(body: DecideRequest, request: Request):
    state = request.app.state.typedlm
    if (body.context is None) == (body.contexts is None):
        raise APIError(400, "give exactly one of 'context' (a string) or 'contexts' (a list of strings)",
                       param="context")
    schema = DecisionSchema.from_dict(body.schema_)  # SchemaError -> 400
    texts = [body.context] if body.context is not None else body.contexts
    try:  # every check before queueing model work, once
        job = prepare(schema, texts, body.options(), engine=state.engine)
    except CalibrationMismatch as e:
        raise APIError(400, str(e), param="calibration") from e
    except PriorError as e:
        raise APIError(400, str(e), param="prior") from e
    except TypedLMError as e:  # a context: empty, too long
        raise APIError(400, str(e), param="contexts" if body.contexts is not None else "context") from e
    ds = await state.run_stepwise(run, job)
    return ds[0].to_dict() if body.context is not None else [d.to_dict() for d in ds]


def systemone_schema(questions: dict[str, SystemOneQuestion]) -> tuple[DecisionSchema, dict[str, str]]:
    """System One questions -> a decision schema (question ids become field names q0, q1, ...)."""
    if not questions:
        raise SchemaError("questions is empty")
    fields, names = {}, {}
    for i, (qid, q) in enumerate(questions.items()):
        name = f"q{i}"
        names[qid] = name
        if not q.instructions.strip():
            raise SchemaError(f"question {qid!r}: instructions are empty")
        if q.type == "noul":
            if q.criteria:
                raise SchemaError(f"question {qid!r}: a noul question takes no criteria")
            fields[name] = {"type": "boolean", "description": q.instructions}
            continue
        if not q.criteria:
            raise SchemaError(f"question {qid!r}: a {q.type} question needs criteria")
        fields[name] = {"type": "enum", "description": q.instructions, "choices": q.criteria,
                        "ordered": q.type == "score"}
    try:
        return DecisionSchema.from_dict({"fields": fields}), names
    except SchemaError as e:  # name the question, not the internal field
        msg = str(e)
        for qid, name in names.items():
            msg = msg.replace(f"field '{name}'", f"question {qid!r}")
        raise SchemaError(msg) from e


def systemone_answers(questions: dict[str, SystemOneQuestion], names: dict[str, str], d) -> dict:
    answers = {}
    for qid, q in questions.items():
        f = d.fields[names[qid]]
        if q.type == "noul":
            p = f.probabilities["true"]
            answers[qid] = {"type": "noul", "noul": p, "confidence": max(p, 1 - p)}
        elif q.type == "choice":
            answers[qid] = {"type": "choice", "choice": f.value, "confidence": f.probability,
                            "probabilities": f.probabilities}
        else:
            levels = list(f.probabilities)
            probs = [f.probabilities[k] for k in levels]
            answers[qid] = {"type": "score", "score": sum(i * p for i, p in enumerate(probs)),
                            "argmax_level": max(range(len(probs)), key=probs.__getitem__),
                            "probabilities": probs, "legend": levels}
    return answers


@router.post("/v1/systemone")
async def v1_systemone(body: SystemOneRequest, request: Request):
    state = request.app.state.typedlm
    context = body.state if isinstance(body.state, str) else canonical_json(body.state)
    if not context.strip():
        raise APIError(400, "state is empty", param="state")
    schema, names = systemone_schema(body.questions)
    job = prepare(schema, [context], DecideOptions(scoring=body.scoring), engine=state.engine)  # checks -> 400
    d = (await state.run_stepwise(run, job))[0]
    n_prompt, n_scored = d.usage["prompt_tokens"], d.usage["scored_tokens"]
    return {"model": state.engine.name, "answers": systemone_answers(body.questions, names, d),
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": 0, "total_tokens": n_prompt,
                      "scored_tokens": n_scored}}
