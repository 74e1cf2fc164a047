"""HTTP routes: ``POST /v1/decide`` (Decision JSON) and ``POST /v1/systemone`` (TypeSafe System One wire
shape). The server includes ``router``; handlers take the engine from ``request.app.state.typedlm`` and
run decide work through its ``run_stepwise`` (forwards interleaved with decode steps) (see :mod:`typedlm.server.state`). The decision logic lives in :mod:`typedlm.decide`."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from ..decide.api import check_options, decide, decide_many
from ..decide.plan import DEFAULT_SCORING, get_plan
from ..decide.prior import DEFAULT_PRIOR
from ..decide.prompt import prompt_ids
from ..decide.schema import DecisionSchema, SchemaError
from ..errors import TypedLMError
from ..grammar.spec import canonical_json
from .errors import APIError

router = APIRouter()
MAX_CONTEXTS = 64  # contexts in one /v1/decide request


class DecideRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_: dict = Field(alias="schema")
    context: str | None = None
    contexts: list[str] | None = Field(default=None, min_length=1, max_length=MAX_CONTEXTS)  # -> a list of results
    scoring: Literal["labels", "slots"] = DEFAULT_SCORING
    allow_none_of_above: bool = False
    abstain_below_margin: float | None = Field(default=None, ge=0.0, le=1.0)
    prior: Literal["none", "neutral", "batch"] = DEFAULT_PRIOR  # "batch": from the request's own contexts (>= 2)
    calibration: dict | None = None  # a CalibrationBundle made for this server's model (typedlm calibrate)
    model: str | None = None  # informational: the server has one engine


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


def _check(engine, schema: DecisionSchema, scoring: str, nota: bool, context: str) -> None:
    """Everything that can be wrong with one context, before queueing model work."""
    prompt_ids(engine, get_plan(engine, schema, scoring, nota), context)


@router.post("/v1/decide")
async def v1_decide(body: DecideRequest, request: Request):
    state = request.app.state.typedlm
    if (body.context is None) == (body.contexts is None):
        raise APIError(400, "give exactly one of 'context' (a string) or 'contexts' (a list of strings)",
                       param="context")
    schema = DecisionSchema.from_dict(body.schema_)  # SchemaError -> 400
    texts = [body.context] if body.context is not None else body.contexts
    for i, text in enumerate(texts):
        try:
            _check(state.engine, schema, body.scoring, body.allow_none_of_above, text)
        except TypedLMError as e:
            raise APIError(400, f"contexts[{i}]: {e}" if body.contexts is not None else str(e),
                           param="contexts" if body.contexts is not None else "context") from e
    check_options(state.engine, get_plan(state.engine, schema, body.scoring, body.allow_none_of_above), body.prior,
                  body.calibration, len(texts))
    ds = await state.run_stepwise(decide_many, schema, texts, scoring=body.scoring,
                                  allow_none_of_above=body.allow_none_of_above,
                                  abstain_below_margin=body.abstain_below_margin, prior=body.prior,
                                  calibration=body.calibration)
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
    _check(state.engine, schema, body.scoring, False, context)
    d = await state.run_stepwise(decide, schema, context, scoring=body.scoring)
    n_prompt, n_scored = d.usage["prompt_tokens"], d.usage["scored_tokens"]
    return {"model": state.engine.name, "answers": systemone_answers(body.questions, names, d),
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": 0, "total_tokens": n_prompt,
                      "scored_tokens": n_scored}}
