"""The serving object of ``/v1/decide`` and ``/v1/systemone``: every check runs before model work is queued
(:func:`typedlm.decide.api.prepare`, errors as 400s naming the field), then the decision runs through
``state.run_decision`` (its forwards are work of the engine's scheduler, beside the decode streams).
The decision logic lives in :mod:`typedlm.decide`."""

from __future__ import annotations

from ...decide.api import prepare, run
from ...decide.calibrate.bundle import CalibrationMismatch
from ...decide.options import DecideOptions
from ...decide.prior import PriorError
from ...decide.schema import DecisionSchema, SchemaError
from ...errors import TypedLMError
from ...grammar.spec import canonical_json
from ..errors import APIError
from .protocol import DecideRequest, SystemOneQuestion, SystemOneRequest


class ServingDecide:
    def __init__(self, state):
        self.state = state

    async def decide(self, body: DecideRequest, http=None) -> dict | list[dict]:
        """One Decision dict for ``context``, a list of them for ``contexts``."""
        if (body.context is None) == (body.contexts is None):
            raise APIError(400, "give exactly one of 'context' (a string) or 'contexts' (a list of strings)",
                           param="context")
        schema = DecisionSchema.from_dict(body.schema_)  # SchemaError -> 400
        texts = [body.context] if body.context is not None else body.contexts
        try:  # every check before queueing model work, once
            job = prepare(schema, texts, body.options(), engine=self.state.engine)
        except CalibrationMismatch as e:
            raise APIError(400, str(e), param="calibration") from e
        except PriorError as e:
            raise APIError(400, str(e), param="prior") from e
        except TypedLMError as e:  # a context: empty, too long
            raise APIError(400, str(e), param="contexts" if body.contexts is not None else "context") from e
        ds = await self.state.run_decision(run, job, http=http)
        return ds[0].to_dict() if body.context is not None else [d.to_dict() for d in ds]

    async def systemone(self, body: SystemOneRequest, http=None) -> dict:
        """The answers in the System One shape; usage counts the prompt and the scored tokens."""
        state = self.state
        context = body.state if isinstance(body.state, str) else canonical_json(body.state)
        if not context.strip():
            raise APIError(400, "state is empty", param="state")
        schema, names = systemone_schema(body.questions)
        job = prepare(schema, [context], DecideOptions(scoring=body.scoring), engine=state.engine)  # checks -> 400
        d = (await state.run_decision(run, job, http=http))[0]
        n_prompt, n_scored = d.usage["prompt_tokens"], d.usage["scored_tokens"]
        return {"model": state.engine.name, "answers": systemone_answers(body.questions, names, d),
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": 0, "total_tokens": n_prompt,
                          "scored_tokens": n_scored}}


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
