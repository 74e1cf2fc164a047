"""Fuzz the grammar layer with hypothesis: generated schemas, regexes and grammars never crash the
process and never hang (every compile returns or raises a TypedLMError within the time limit), and a
grammar compiled from a generated schema never accepts an instance jsonschema rejects (soundness)."""

import json
import time

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from typedlm.errors import TypedLMError
from typedlm.grammar.spec import make_constraint

TIMEOUT_S = 5.0
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NAMES = st.sampled_from(["a", "b", "c"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.sampled_from([0.5, 2.5, -1.5, 3.0]),
                    st.text(alphabet="abc1", max_size=3))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(NAMES, inner, max_size=3)), max_leaves=8)
TYPES = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"])
PATTERNS = st.sampled_from(["a", "^a", "b$", "^a.$", "[ab]+", "^[0-9]{1,2}$", "a|b", "(?=a)", "^\\d*$", ".", "\\w"])
NUMS = st.one_of(st.integers(-3, 5), st.sampled_from([0.5, 2.5, -1.5]))
COUNTS = st.integers(0, 3)


def _schemas(children):
    kw = {
        "type": st.one_of(TYPES, st.lists(TYPES, min_size=1, max_size=3, unique=True)),
        "minimum": NUMS, "maximum": NUMS, "exclusiveMinimum": NUMS, "exclusiveMaximum": NUMS,
        "multipleOf": st.sampled_from([1, 2, 3, 0.5]),
        "minLength": COUNTS, "maxLength": COUNTS, "pattern": PATTERNS,
        "format": st.sampled_from(["email", "ipv4", "date", "uuid"]),
        "enum": st.lists(JSON, min_size=1, max_size=3), "const": JSON,
        "properties": st.dictionaries(NAMES, children, max_size=3),
        "required": st.lists(NAMES, max_size=3, unique=True),
        "additionalProperties": children, "minProperties": COUNTS, "maxProperties": COUNTS,
        "propertyNames": children, "patternProperties": st.dictionaries(PATTERNS, children, max_size=2),
        "dependentRequired": st.dictionaries(NAMES, st.lists(NAMES, max_size=2, unique=True), max_size=2),
        "dependentSchemas": st.dictionaries(NAMES, children, max_size=2),
        "items": children, "prefixItems": st.lists(children, min_size=1, max_size=2),
        "minItems": COUNTS, "maxItems": COUNTS, "uniqueItems": st.booleans(),
        "contains": children, "minContains": COUNTS, "maxContains": COUNTS,
        "allOf": st.lists(children, min_size=1, max_size=3), "anyOf": st.lists(children, min_size=1, max_size=3),
        "oneOf": st.lists(children, min_size=1, max_size=3), "not": children,
        "if": children, "then": children, "else": children,
        "unevaluatedProperties": children, "$ref": st.just("#"),
    }
    return st.lists(st.sampled_from(sorted(kw)), max_size=4, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: kw[k] for k in keys}))


SCHEMAS = st.recursive(st.one_of(st.booleans(), st.just({}), st.fixed_dictionaries({"type": TYPES})),
                       _schemas, max_leaves=6)


@pytest.fixture(scope="module")
def grammars():
    from tests.support.grammar import default_grammars

    g = default_grammars("xgrammar")  # these fuzzers state xgrammar's own strictness (raw_only below)
    g.timeout_s = TIMEOUT_S
    return g


@pytest.fixture(scope="module", params=["xgrammar", "llguidance"])
def engine_grammars(request, grammars):
    """The same compiler with each grammar engine for JSON Schemas (llguidance: what it refuses is skipped)."""
    from typedlm.grammar.compiler import Grammars

    g = Grammars(grammars.tokenizer_info, schema_registry=grammars.schema_registry, timeout_s=TIMEOUT_S,
                 engine=request.param)
    return g


def _compile(grammars, **kw):
    """Compile; return the grammar or None on a TypedLMError. Anything else (or a hang) fails."""
    t0 = time.perf_counter()
    try:
        c = make_constraint(**kw)
        return grammars.compile(c)[0] if c is not None else None
    except TypedLMError:
        return None
    finally:
        assert time.perf_counter() - t0 < TIMEOUT_S + 3.0, "compile did not honour the time limit"


@SETTINGS
@given(schema=SCHEMAS, instances=st.lists(JSON, min_size=8, max_size=8))
def test_generated_schemas_never_crash_and_stay_sound(engine_grammars, schema, instances):
    from tests.support.grammar import accepts, renderings
    from typedlm.grammar.schema import prepare_schema

    compiled = _compile(engine_grammars, json_schema=schema, strict=False, any_whitespace=False)
    if compiled is None:
        return
    core = prepare_schema(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for inst in instances:
        for text in renderings(inst, core):
            if accepts(compiled, text):
                assert validator.is_valid(json.loads(text)), f"grammar accepts {text} but {schema} forbids it"


REGEX = st.text(alphabet="ab01.*+?|()[]{}^$\\-,dws", max_size=14)


@SETTINGS
@given(regex=REGEX)
def test_generated_regexes_never_crash(grammars, regex):
    _compile(grammars, regex=regex)
    _compile(grammars, json_schema={"type": "string", "pattern": regex}, strict=False, any_whitespace=False)


RULE_BODY = st.lists(st.one_of(st.sampled_from(['"a"', '"b"', "[a-z]", "root", "x", "(", ")", "|", "*", "+", "?",
                                                '"\\n"', "[^a]", ".", "::=", "{1,3}"])), max_size=10)


@SETTINGS
@given(root=RULE_BODY, x=RULE_BODY)
def test_generated_grammars_never_crash(grammars, root, x):
    text = f"root ::= {' '.join(root)}\nx ::= {' '.join(x)}\n"
    _compile(grammars, grammar=text)
    _compile(grammars, lark=text.replace("root", "start").replace("::=", ":"))


def test_compile_time_limit_raises_a_clear_error(grammars):
    from typedlm.grammar.compiler import GrammarCompileTimeout, Grammars

    slow = Grammars(grammars.tokenizer_info, timeout_s=0.05)
    pattern = "^([a-z0-9]{1,64}\\.){1,20}[a-z]{2,20}$"  # ~2 s to compile on this CPU
    with pytest.raises(GrammarCompileTimeout, match="time limit of 0.05 s"):
        slow.compile(make_constraint(regex=pattern))
    assert slow.stats.timeouts == 1
    slow.timeout_s = 30.0
    compiled, _ = slow.compile(make_constraint(choice=["yes", "no"]))  # the process goes on
    assert compiled is not None


def sample_texts(compiled, tokenizer, rng, *, walks=4, max_tokens=48):
    """Random walks through the grammar at the token level (what a random-weight model could emit), with
    either engine's matcher; yields the texts of the walks that reached a stop."""
    import numpy as np

    from typedlm.grammar.backends import masks

    vocab = len(tokenizer)
    mask = masks.allocate(1, vocab)
    for _ in range(walks):
        m = compiled.new_state()
        stop_ids = set(m.stop_ids)
        ids = []
        for _ in range(max_tokens):
            m.fill_mask(mask, 0)
            bits = np.unpackbits(mask[0].numpy().view(np.uint8), bitorder="little")[:vocab]
            allowed = np.flatnonzero(bits).tolist()
            stops = [i for i in allowed if i in stop_ids]
            if stops and rng.random() < 0.5:
                yield tokenizer.decode(ids)
                break
            # prefer short tokens (structure, small numbers) so that walks reach a stop
            tok = rng.choice(allowed)
            if rng.random() < 0.7:
                tok = min(rng.sample(allowed, min(8, len(allowed))), key=lambda i: len(tokenizer.decode([i])))
            if tok in stop_ids:
                yield tokenizer.decode(ids)
                break
            assert m.accept([tok])
            ids.append(tok)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schema=SCHEMAS, seed=st.integers(0, 2**16))
def test_what_the_grammar_emits_is_valid(engine_grammars, schema, seed):
    """Soundness from the other side: texts generated by walking the grammar validate."""
    import random

    from typedlm.testing import default_tokenizer

    compiled = _compile(engine_grammars, json_schema=schema, strict=False, any_whitespace=False)
    if compiled is None:
        return
    tok = _TOK.setdefault("tok", default_tokenizer())
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for text in sample_texts(compiled, tok, random.Random(seed)):
        assert validator.is_valid(json.loads(text)), f"grammar emitted {text!r}, which {schema} forbids"


_TOK: dict = {}


ANY_KEYWORD = st.sampled_from(["type", "enum", "const", "properties", "required", "items", "prefixItems",
                               "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "minimum",
                               "multipleOf", "minLength", "pattern", "format", "patternProperties",
                               "additionalProperties", "dependentRequired", "dependentSchemas", "propertyNames",
                               "uniqueItems", "contains", "minContains", "unevaluatedProperties", "$id", "$defs",
                               "minItems", "maxProperties", "$anchor", "exclusiveMaximum"])
GARBAGE = st.recursive(st.one_of(SCALARS, st.floats(allow_nan=False), st.text(max_size=4)),
                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                               st.dictionaries(st.one_of(ANY_KEYWORD, NAMES), inner, max_size=3)),
                       max_leaves=10)


@SETTINGS
@given(schema=st.dictionaries(ANY_KEYWORD, GARBAGE, max_size=4))
def test_malformed_schemas_are_clear_errors(schema):
    """Wrong-typed keyword values anywhere: a TypedLMError naming the problem, never another exception."""
    from typedlm.grammar.schema import prepare_schema

    from typedlm.grammar.schema.rewrites import INTERNAL

    try:
        prepare_schema(schema)
    except TypedLMError as e:
        assert INTERNAL not in str(e)  # the last-resort guard must not be what caught it


ATOM = st.sampled_from(["a", "b", "[ab]", "[^a]", ".", "\\d", "c"])
QUANT = st.sampled_from(["?", "*", "+", "{1,2}", "{0,1}", "{2}", "??", "+?"])


def _regex_ext(inner):
    return st.one_of(st.lists(inner, min_size=2, max_size=3).map("".join),
                     st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + "|".join(xs) + ")"),
                     st.tuples(inner, QUANT).map(lambda t: "(" + t[0] + ")" + t[1]),
                     st.tuples(ATOM, QUANT).map("".join))


SIMPLE_REGEX = st.recursive(ATOM, _regex_ext, max_leaves=6)


@SETTINGS
@given(rx=SIMPLE_REGEX, texts=st.lists(st.text("abc1", max_size=4), min_size=6, max_size=6))
def test_patterns_match_exactly_what_the_regex_matches(grammars, rx, texts):
    """Differential: the grammar for {"pattern": "^rx$"} accepts a string iff Python's re (the same
    as ECMA-262 for these constructs) matches it whole."""
    import re

    from tests.support.grammar import accepts

    compiled = _compile(grammars, json_schema={"type": "string", "pattern": f"^{rx}$"}, strict=False,
                        any_whitespace=False)
    if compiled is None:
        return
    for t in texts:
        assert accepts(compiled, json.dumps(t)) == (re.fullmatch(rx, t) is not None), (rx, t)


@SETTINGS
@given(rx=SIMPLE_REGEX, anchored=st.booleans(), lo=st.integers(0, 3), span=st.one_of(st.none(), st.integers(0, 4)),
       texts=st.lists(st.text('ab1"\\\n', max_size=6), min_size=6, max_size=6))
def test_lengths_beside_a_pattern_are_exact(grammars, rx, anchored, lo, span, texts):
    """Differential: minLength/maxLength beside a pattern (the automaton product of :mod:`strings`)
    accept a string iff Python's re finds the pattern and its length is within the bounds; the texts
    hold characters a JSON string must escape."""
    import re

    from tests.support.grammar import accepts

    pattern = f"^{rx}$" if anchored else rx
    hi = None if span is None else lo + span
    schema = {"type": "string", "pattern": pattern, "minLength": lo, **({} if hi is None else {"maxLength": hi})}
    compiled = _compile(grammars, json_schema=schema, strict=False, any_whitespace=False)
    if compiled is None:
        return
    raw_only = _counted_without_escapes(schema)
    for t in texts:
        ok = re.search(pattern, t) is not None and lo <= len(t) <= (len(t) if hi is None else hi)
        if raw_only and any(c in '"\\' or ord(c) < 0x20 for c in t):
            ok = False  # a counted repetition of one class: no JSON escape (strings.py, stricter and sound)
        assert accepts(compiled, json.dumps(t)) == ok, (schema, t)


def _counted_without_escapes(schema) -> bool:
    """The core form counts the string as one class repeated, written without escapes (:mod:`strings`)."""
    from typedlm.grammar.schema import prepare_schema
    from typedlm.grammar.schema.ir import Text, ir_of
    from typedlm.grammar.schema.strings import loop_class

    ir = ir_of(prepare_schema(schema))
    spec = ir.spec if isinstance(ir, Text) else None
    cls = spec and loop_class(spec)
    return bool(cls) and '"\\U0000005C' not in cls


ECMA_ATOM = st.sampled_from(["a", "b", "[ab]", "[^a]", ".", "\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "\\.", "\\t",
                             "[a-c1]", "[^\\d\\s]", "[\\w.]", "\\x61", "\\u0062", " "])
ECMA_REGEX = st.recursive(ECMA_ATOM, _regex_ext, max_leaves=5)
BRANCH = st.tuples(st.booleans(), ECMA_REGEX, st.booleans()).map(lambda t: ("^" if t[0] else "") + t[1] +
                                                                  ("$" if t[2] else ""))


@SETTINGS
@given(branches=st.lists(BRANCH, min_size=1, max_size=3),
       texts=st.lists(st.text("ab1 _.\t", max_size=5), min_size=8, max_size=8))
def test_ecma_patterns_are_searched_exactly(grammars, branches, texts):
    """Differential against Python's re (search, as jsonschema does; on this alphabet ECMA-262 agrees):
    classes and their escapes, {m,n}, groups, a top-level alternation whose branches carry their own
    anchors."""
    import re

    from tests.support.grammar import accepts

    pattern = "|".join(branches)
    compiled = _compile(grammars, json_schema={"type": "string", "pattern": pattern}, strict=False,
                        any_whitespace=False)
    assert compiled is not None, pattern  # every such pattern is ECMA-regular: none is refused
    for t in texts:
        assert accepts(compiled, json.dumps(t)) == (re.search(pattern, t) is not None), (pattern, t)
