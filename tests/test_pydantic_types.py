"""Pydantic v2's standard types: each model's schema compiles (no refusal), and what the tiny
random-weight model samples under it validates with ``Model.model_validate_json`` (six seeds; a
random model may run a free string to ``max_tokens``, so at least one seed must finish and every
finished output must validate).

``LAXER``: rows whose Pydantic JSON Schema accepts more than Pydantic does (the grammar enforces the
schema exactly, so there the output is checked against the schema only). The README lists this table.
``set[str]`` (uniqueItems over strings: not context-free) and ``HttpUrl`` (``maxLength: 2083`` beside
``format: uri``) are refused, and tested as refused.
"""

import datetime
import decimal
import enum
import ipaddress
import uuid
from typing import Annotated, Literal, Optional, Union

import pytest
from pydantic import AnyUrl, BaseModel, Field, HttpUrl, conint, conlist, constr, confloat

from typedlm.errors import GrammarCompileError
from typedlm.generate import generate
from typedlm.grammar.schema import find_refusals

SEEDS = range(6)
LAXER = {
    "Decimal": "the schema is number | any string",
    "timedelta": "format duration has no size limit; Pydantic rejects huge components",
}
# a free URI never ends under a random-weight model: this row checks a written instance through the
# compiled grammar instead of sampling
NOT_SAMPLED = {"AnyUrl": '{"v":"https://example.com/a?b=1#c"}'}


class Color(enum.Enum):
    red = "red"
    green = "green"


class Level(enum.IntEnum):
    low = 1
    high = 2


class Inner(BaseModel):
    a: int
    b: Optional[str] = None


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: conint(ge=1, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


TABLE = {
    "datetime": datetime.datetime, "date": datetime.date, "time": datetime.time,
    "timedelta": datetime.timedelta, "UUID": uuid.UUID, "Decimal": decimal.Decimal, "AnyUrl": AnyUrl,
    "IPv4Address": ipaddress.IPv4Address, "IPv6Address": ipaddress.IPv6Address,
    "set[Enum]": set[Color], "frozenset[IntEnum]": frozenset[Level], "bytes": bytes,
    "Enum": Color, "IntEnum": Level, "Literal": Literal["a", "b", 3], "Optional[int]": Optional[int],
    "nested model": Inner, "list[model]": conlist(Inner, max_length=2),
    "discriminated union": Annotated[Union[Cat, Dog], Field(discriminator="kind")],
    "constr": constr(min_length=2, max_length=5), "constr(pattern)": constr(pattern=r"^[a-z]{1,8}$"),
    "conint": conint(ge=0, le=10), "conint(multiple_of)": conint(multiple_of=5, ge=0, le=100),
    "conint(multiple_of, ge)": conint(multiple_of=5, ge=3),
    "confloat": confloat(gt=0, lt=1), "list length bounds": conlist(int, min_length=1, max_length=3),
    "dict[str, int]": dict[str, int], "tuple[int, str]": tuple[int, constr(max_length=4)], "tuple[bool, ...]": tuple[bool, ...],
}
REFUSED = {"set[str]": (set[str], "uniqueItems"), "HttpUrl": (HttpUrl, "maxLength")}


def _model(t):
    return type("M", (BaseModel,), {"__annotations__": {"v": t}})


@pytest.mark.parametrize("name", sorted(TABLE))
def test_standard_type_compiles_and_samples_validate(tiny, name):
    model = _model(TABLE[name])
    assert find_refusals(model.model_json_schema()) == []
    if name in NOT_SAMPLED:
        from typedlm.bench.jsonschema_suite import accepts
        from typedlm.grammar.spec import make_constraint

        compiled, _ = tiny.grammars.compile(make_constraint(json_schema=model, any_whitespace=False))
        assert accepts(compiled, NOT_SAMPLED[name])
        model.model_validate_json(NOT_SAMPLED[name])
        return
    finished = 0
    for seed in SEEDS:
        r = generate("x", engine=tiny, json_schema=model, seed=seed, max_tokens=96)
        if r.finish_reason == "length":
            continue
        finished += 1
        assert r.finish_reason == "stop", (name, seed, r.text[-80:])
        assert r.schema_valid, (name, seed, r.text, r.schema_errors)
        if name not in LAXER:
            model.model_validate_json(r.text)  # raises on anything Pydantic rejects
        if finished == 2:
            break
    assert finished, f"{name}: no seed finished within max_tokens"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unenforceable_standard_types_are_refused_by_keyword(tiny, name):
    t, keyword = REFUSED[name]
    with pytest.raises(GrammarCompileError) as e:
        generate("x", engine=tiny, json_schema=_model(t), max_tokens=4)
    assert e.value.keyword == keyword
