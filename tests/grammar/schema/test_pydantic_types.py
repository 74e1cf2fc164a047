"""Pydantic v2's standard types: each model's schema compiles (no refusal), and what the tiny
random-weight model samples under it validates with ``Model.model_validate_json`` (six seeds; a
random model may run a free string to ``max_tokens``, so at least one seed must finish and every
finished output must validate).

``LAXER``: rows whose Pydantic JSON Schema accepts more than Pydantic does (the grammar enforces the
schema exactly, so there the output is checked against the schema only).
``set[str]``/``frozenset[...]`` (uniqueItems) are exact: the decode-time guard (``typedlm/grammar/unique``);
Pydantic's format names (``uuid4``, ``ipvanyaddress``, ``name-email``) are asserted as Pydantic means them.
docs/guides/pydantic-types.md lists the table. ``HttpUrl`` (``maxLength: 2083`` beside
``format: uri``) compiles to the stricter-but-sound ``formats.BOUNDED_URI``; ``EmailStr`` (``format: email``) and
``NameEmail`` to addresses email-validator accepts (checked over addresses drawn from the regexes).
``test_default_model_table``: the issue's table on the default model (its outputs validate).
"""

import datetime
import decimal
import enum
import ipaddress
import json
import uuid
from typing import Annotated, Literal, Optional, Union

import pytest
import jsonschema
from pydantic import (UUID1, UUID4, AnyHttpUrl, AnyUrl, BaseModel, EmailStr, Field, HttpUrl, IPvAnyAddress, NameEmail,
                      TypeAdapter, conint, conlist, constr, confloat)

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
NOT_SAMPLED = {"AnyUrl": '{"v":"https://example.com/a?b=1#c"}', "AnyHttpUrl": '{"v":"http://example.com/x"}',
               "HttpUrl": '{"v":"https://example.com/a?b=1#c"}', "EmailStr": '{"v":"joe.bloggs@example.com"}',
               "set[str]": '{"v":["a","b"]}', "NameEmail": '{"v":"Joe Bloggs <joe@example.com>"}'}


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
    "constr(pattern, lengths)": constr(pattern=r"^[a-z]+$", min_length=2, max_length=6), "AnyHttpUrl": AnyHttpUrl,
    "HttpUrl": HttpUrl, "EmailStr": EmailStr, "set[str]": set[str], "frozenset[int]": frozenset[int],
    "NameEmail": NameEmail, "IPvAnyAddress": IPvAnyAddress, "UUID4": UUID4, "UUID1": UUID1,
    "conint": conint(ge=0, le=10), "conint(multiple_of)": conint(multiple_of=5, ge=0, le=100),
    "conint(multiple_of, ge)": conint(multiple_of=5, ge=3),
    "confloat": confloat(gt=0, lt=1), "list length bounds": conlist(int, min_length=1, max_length=3),
    "dict[str, int]": dict[str, int], "tuple[int, str]": tuple[int, constr(max_length=4)], "tuple[bool, ...]": tuple[bool, ...],
}


def _model(t):
    return type("M", (BaseModel,), {"__annotations__": {"v": t}})


@pytest.mark.parametrize("name", sorted(TABLE))
def test_standard_type_compiles_and_samples_validate(tiny, name):
    model = _model(TABLE[name])
    assert find_refusals(model.model_json_schema()) == []
    if name in NOT_SAMPLED:
        from tests.support.grammar import accepts
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


def test_sets_are_exact_at_decode_time(tiny):
    """set[...] / frozenset[...] (uniqueItems): compiled exactly (the decode-time guard), no relaxing:
    a repeated item is rejected by the compiled grammar, and what the model writes Pydantic reads."""
    from tests.support.grammar import accepts
    from typedlm.grammar.spec import make_constraint

    model = _model(set[str])
    compiled, _ = tiny.grammars.compile(make_constraint(json_schema=model, any_whitespace=False))
    assert accepts(compiled, '{"v":["a","b"]}') and not accepts(compiled, '{"v":["a","a"]}')
    model.model_validate_json('{"v":["a","b"]}')


class Site(BaseModel):
    url: HttpUrl


class Homepage(BaseModel):
    homepage: AnyHttpUrl


class Contact(BaseModel):
    email: EmailStr


class Tags(BaseModel):
    tags: set[str] = Field(max_length=3)


class Code(BaseModel):
    code: constr(pattern=r"^[A-Z]{2}[0-9]+$", min_length=3, max_length=6)


DEFAULT_MODEL_TABLE = {  # the Pydantic table: model, prompt, lenient
    "HttpUrl": (Site, "The website of the Python programming language, as JSON.", False),
    "AnyHttpUrl": (Homepage, "The homepage of Wikipedia, as JSON.", False),
    "EmailStr": (Contact, "An email address for John at example.com, as JSON.", False),
    "set[str]": (Tags, "Three tags for a blog post about cooking pasta, as JSON.", False),
    "constr(pattern, lengths)": (Code, "A product code: two capital letters then digits, as JSON.", False),
}


@pytest.mark.real_model
@pytest.mark.parametrize("name", sorted(DEFAULT_MODEL_TABLE))
def test_default_model_table(real, name):
    """Each row compiles (exactly: ``lenient`` is off) and the default model's greedy output
    finishes and validates with ``Model.model_validate_json``."""
    import warnings

    model, prompt, lenient = DEFAULT_MODEL_TABLE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = generate(messages=[{"role": "user", "content": prompt}], engine=real, json_schema=model, lenient=lenient,
                     temperature=0, max_tokens=64, any_whitespace=False)
    assert r.finish_reason == "stop", r.text
    assert r.schema_valid, (r.text, r.schema_errors)
    model.model_validate_json(r.text)


@pytest.mark.parametrize("fmt,kind", [("email", EmailStr), ("name-email", NameEmail)])
def test_every_address_the_email_regex_admits_is_valid_for_pydantic(fmt, kind):
    """``format: email`` is written stricter than JSON Schema's (an '@') so that Pydantic's ``EmailStr``
    (email-validator, deliverability unchecked) takes every address the grammar admits: 400 addresses drawn
    from the regex itself (long local parts, three host labels, '-' and '_' and '+'), each validated."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from typedlm.grammar.schema.formats import PATTERNS

    email_validator = pytest.importorskip("email_validator")
    adapter = TypeAdapter(kind)

    @settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.from_regex(PATTERNS[fmt], fullmatch=True))
    def check(address):
        adapter.validate_python(address)
        plain = address.rsplit("<", 1)[-1].rstrip(">")
        email_validator.validate_email(plain, check_deliverability=False)

    check()


def test_the_base_install_imports_without_email_validator():
    """email-validator is optional: without it the grammar package imports and name-email is judged by its
    own regex (a subprocess, with the module blocked)."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['email_validator'] = None\n"
            "from typedlm.grammar.schema.formats import FORMAT_CHECKER as F\n"
            "print(F.conforms('Joe <joe@example.com>', 'name-email'), F.conforms('no', 'name-email'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]
