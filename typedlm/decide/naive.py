"""The naive baseline of ``typedlm bench decide``: the same fields generated as JSON under the JSON-Schema
grammar, on the decide prompt (greedy)."""

from __future__ import annotations

from typing import Any

from ..engine import Engine
from ..generate.api import generate
from .api import default_engine, plan_for
from .options import DecideOptions
from .plan import Plan
from .prompt import prompt_kwargs


def naive_json_schema(plan: Plan) -> dict:
    """JSON Schema of the answer the prompt describes: the same keys and values that rows score."""
    props: dict = {}
    for f in plan.schema.fields:
        if f.type == "boolean":
            props[f.name] = {"type": "boolean"}
            continue
        shown = [plan.shown(f.name, v) for v, _ in plan.choices(f)]
        if f.type == "enum":
            props[f.name] = {"enum": shown}
        else:
            props[f.name] = {"type": "object", "properties": {s: {"type": "boolean"} for s in shown},
                             "required": shown, "additionalProperties": False}
            props[f"{f.name}.count"] = {"enum": list(range(len(shown) + 1))}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def naive_generate(schema: Any, context: str, options: DecideOptions | None = None, *, engine: Engine | None = None,
                   max_tokens: int | None = None, **overrides):
    """Baseline: greedy generation of the whole answer as JSON under the JSON-Schema grammar, same prompt
    (the options' ``scoring`` and ``allow_none_of_above`` shape the prompt, as for ``decide``)."""
    opts = DecideOptions.make(options, **overrides)
    engine = default_engine(engine)
    plan = plan_for(schema, engine, opts.scoring, opts.allow_none_of_above)
    kw = prompt_kwargs(engine, plan, context)
    if max_tokens is None:
        max_tokens = 32 + 16 * sum(1 + len(f.choices) for f in plan.schema.fields)
    return generate(**kw, engine=engine, json_schema=naive_json_schema(plan), any_whitespace=False,
                    temperature=0.0, max_tokens=max_tokens)
