"""``uniqueItems`` at decode time (``typedlm/grammar/unique``): the guard beside the grammar.

- What the tiny random-weight model samples under unique-array schemas (strings, numbers, objects,
  nested arrays, a finite enum space) is valid per ``jsonschema`` every time: 600 generations in ``make test``
  (PER_CASE; 200 gives the 2,000 of issue 36), batch 16, both engines, half of them with jump-forward.
- A finite item space is used up and still completes: ``minItems`` N over an enum of N values.
- The check is JSON equality (``1 == 1.0``, key order ignored, ``true != 1``) and covers every nesting level.
- Where one alternative asks for distinct items and another admits repeats, the schema is refused by name.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from typedlm.errors import GrammarCompileError
from typedlm.generate import SamplingParams, build_sequence
from typedlm.generate.scheduler import run_batch
from typedlm.grammar.controller import GrammarBatch, GrammarRow, accepts_text
from typedlm.grammar.spec import make_constraint
from typedlm.grammar.unique import GuardedCompiled

SCHEMAS = {
    "strings": {"type": "array", "items": {"type": "string", "maxLength": 2}, "uniqueItems": True, "minItems": 2,
                "maxItems": 5},
    "numbers": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 3}, "uniqueItems": True,
                "minItems": 3, "maxItems": 5},
    "objects": {"type": "array", "uniqueItems": True, "minItems": 3, "maxItems": 4,
                "items": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 2},
                                                           "b": {"type": "boolean"}}, "required": ["a", "b"]}},
    "nested": {"type": "array", "uniqueItems": True, "minItems": 3, "maxItems": 4,
               "items": {"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": True, "maxItems": 3}},
    "enum space": {"type": "array", "items": {"enum": list(range(9))}, "uniqueItems": True, "minItems": 9},
}
ENGINES = ("xgrammar", "llguidance")
PER_CASE = 60  # 5 schemas x 2 engines x 60 = 600 generations (200: 2,000; about 10 CPU minutes)
# The random model seldom ends a free number: its fraction digits run on to max_tokens (at 200 per case,
# 5 of 200 llguidance rows finished "numbers"). There the tokens that end a number (',' and ']') are
# favoured, so that arrays close (~1 in 4 rows); the grammar and the guard still decide what is allowed
# (a favoured ',' after a repeated number is masked: it exercises the guard more, not less).
FAVOURED = {"numbers": ",]"}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_sampled_unique_arrays_are_always_valid(tiny, engine, name):
    schema = SCHEMAS[name]
    c = make_constraint(json_schema=schema, engine=engine, any_whitespace=False)
    assert isinstance(tiny.grammars.compile(c)[0], GuardedCompiled)
    bias = {tiny.tokenizer.convert_tokens_to_ids(ch): 4.0 for ch in FAVOURED.get(name, "")}
    seqs = [build_sequence(tiny, tiny.encode_prompt(prompt=f"list {i}"),
                           SamplingParams(max_tokens=64, temperature=1.0, seed=i, logit_bias=bias), c,
                           jump_forward=i % 2 == 0)
            for i in range(PER_CASE)]
    results = run_batch(tiny, seqs, max_batch=16)
    finished = [r for r in results if r.finish_reason == "stop"]
    assert not [r for r in results if r.finish_reason == "error"], [r.error for r in results if r.error][:3]
    assert len(finished) >= PER_CASE // 20, {r.finish_reason for r in results}
    for r in finished:
        jsonschema.validate(json.loads(r.text), schema)  # raises on a repeat
        assert r.schema_valid


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("n", [3, 12])
def test_a_finite_space_is_used_up_and_completes(tiny, engine, n):
    """minItems N over an enum of N values: the guard must steer to the one unused value each time
    (and away from ',' once every value is used), never leaving a row without a legal token."""
    values = [f"v{i}" for i in range(n)]
    schema = {"type": "array", "items": {"enum": values}, "uniqueItems": True, "minItems": n}
    c = make_constraint(json_schema=schema, engine=engine)
    seqs = [build_sequence(tiny, tiny.encode_prompt(prompt=f"all {i}"),
                           SamplingParams(max_tokens=12 * n + 40, temperature=1.0, seed=i), c) for i in range(16)]
    for r in run_batch(tiny, seqs, max_batch=16):
        assert r.finish_reason in ("stop", "length"), r.error
        if r.finish_reason == "stop":
            assert sorted(json.loads(r.text)) == sorted(values)


def test_a_random_walk_over_the_mask_never_repeats_and_never_dies(tiny):
    """Without a model: pick any allowed token at each step (the worst sampler) on a finite space."""
    import random

    schema = {"type": "array", "items": {"enum": ["a", "b", "ab", "abc", 1, 1.5, 2, True, None, "ba"]},
              "uniqueItems": True, "minItems": 8}  # 10 ** 10 arrays: no enum of them, the guard
    compiled, _ = tiny.grammars.compile(make_constraint(json_schema=schema, any_whitespace=False))
    assert isinstance(compiled, GuardedCompiled)
    rng = random.Random(0)
    for _ in range(20):
        row = GrammarRow(compiled, vocab_size=tiny.model_vocab_size, stop_ids=tiny.stop_ids)
        text = b""
        for _ in range(60):
            row.fill()
            if row.state() != "open":
                break
            bits = row.bitmask[row.index]
            ids = [i for i in range(tiny.model_vocab_size) if int(bits[i // 32]) >> (i % 32) & 1
                   and i not in tiny.stop_ids]
            t = rng.choice(ids)
            assert row.accept(t)
            text += compiled.vocab.bytes[t]
        assert row.state() == "complete", text
        value = json.loads(text)
        jsonschema.validate(value, schema)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("text,ok", [
    ('[1,2]', True), ('[1,1.0]', False), ('[1,true]', True), ('[true,true]', False), ('[0,false]', True),
    ('[{"a":1,"b":[1,2]},{"a":1.0,"b":[1,2]}]', False), ('[{"a":1},{"b":[1]}]', True),
    ('[[1,2],[2,1]]', True), ('[[1,2],[1,2]]', False), ('[[1,[1,1]]]', False), ('["a","\\u0061"]', False),
    ('[[],[]]', False), ('[{},{}]', False), ('[null,null]', False), ('[1e0,1]', False),
])
def test_json_equality_at_every_level(tiny, engine, text, ok):
    inner_unique = {"type": "array", "uniqueItems": True}
    schema = {"type": "array", "uniqueItems": True,
              "items": {"anyOf": [{"type": ["number", "boolean", "null", "string"]},
                                  {"type": "object", "properties": {"a": {"type": "number"}, "b": inner_unique}},
                                  {"type": "array", "uniqueItems": True,
                                   "items": {"anyOf": [{"type": "number"}, inner_unique]}}]}}
    compiled, _ = tiny.grammars.compile(make_constraint(json_schema=schema, engine=engine, any_whitespace=False,
                                                        strict=False))
    assert accepts_text(compiled, text) == ok
    assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)) == ok


def test_key_order_does_not_make_objects_differ(tiny):
    schema = {"type": "array", "uniqueItems": True, "items": {"type": "object"}}
    compiled, _ = tiny.grammars.compile(make_constraint(json_schema=schema, strict=False))
    assert not accepts_text(compiled, '[{"a":1,"b":[2]},{"b":[2.0],"a":1}]')
    assert accepts_text(compiled, '[{"a":1,"b":[2]},{"b":[2,2],"a":1}]')


def test_jump_forward_strings_stop_before_a_repeat(tiny):
    schema = {"type": "array", "items": {"const": {"k": "same"}}, "uniqueItems": True}
    compiled, _ = tiny.grammars.compile(make_constraint(json_schema=schema, any_whitespace=False))
    row = GrammarRow(compiled, vocab_size=tiny.model_vocab_size, stop_ids=tiny.stop_ids)
    for t in tiny.tokenizer.encode('[{"k":"same"}', add_special_tokens=False):
        row.fill()
        assert row.accept(t)
    row.fill()
    assert row.state() == "open"  # only "]" is left: "," would begin a second, equal item
    assert "," not in row.jump_string()


@pytest.mark.parametrize("schema,pointer", [
    ({"anyOf": [{"type": "array", "uniqueItems": True, "items": {"type": "string"}},
                {"type": "array", "items": {"type": "string", "maxLength": 1}}]}, "/"),
    ({"type": "object", "properties": {"t": {"anyOf": [{"type": "array", "uniqueItems": True, "items": {"type": "integer"}},
                                                       {"type": "array", "items": {"type": "boolean"}}]}}}, "/t"),
])
def test_an_alternative_that_allows_repeats_beside_one_that_does_not_is_refused(tiny, schema, pointer):
    with pytest.raises(GrammarCompileError) as e:
        tiny.grammars.compile(make_constraint(json_schema=schema))
    assert e.value.keyword == "uniqueItems" and e.value.pointer == pointer


def test_a_structural_tag_cannot_embed_the_guard(tiny):
    tag = {"type": "structural_tag", "format": {"type": "tag", "begin": "<a>", "end": "</a>", "content": {
        "type": "json_schema", "json_schema": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}}
    with pytest.raises(GrammarCompileError) as e:
        tiny.grammars.compile(make_constraint(structural_tag=tag))
    assert e.value.keyword == "uniqueItems"


def test_a_unique_array_beside_key_classes_compiles(tiny):
    """A listed property next to patternProperties (the core form's key classes) is found by its name."""
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}},
              "patternProperties": {"^x": {"type": "integer"}}}
    compiled, _ = tiny.grammars.compile(make_constraint(json_schema=schema, strict=False, any_whitespace=False))
    assert accepts_text(compiled, '{"a":[1,2],"x1":3}') and not accepts_text(compiled, '{"a":[1,1]}')


@pytest.mark.parametrize("engine", ENGINES)
def test_a_batched_fill_restricts_guarded_rows_and_rollback_rereads(tiny, engine):
    """GrammarBatch fills a guarded row and a plain row of one engine together; the guarded row's mask is
    then narrowed (no quote that ends a second "a"), the plain one's is not; a rollback puts the cursor back with the engine."""
    items = {"type": "string", "maxLength": 3}
    unique = make_constraint(json_schema={"type": "array", "items": items, "uniqueItems": True}, engine=engine,
                             any_whitespace=False)
    plain = make_constraint(json_schema={"type": "array", "items": items}, engine=engine, any_whitespace=False)
    rows = [GrammarRow(tiny.grammars.compile(c)[0], vocab_size=tiny.model_vocab_size, stop_ids=tiny.stop_ids)
            for c in (unique, plain)]
    assert rows[0].cursor.filler is rows[1].cursor.filler  # one engine: one batched call for both
    prefix = tiny.tokenizer.encode('["a","a', add_special_tokens=False)
    for r in rows:
        assert r.cursor.accept(prefix)
    bitmask = torch.zeros(2, rows[0].bitmask.shape[1], dtype=torch.int32)
    for i, r in enumerate(rows):
        r.attach(bitmask, i)
    GrammarBatch().fill(rows, bitmask)
    guarded = tiny.grammars.compile(unique)[0]
    assert isinstance(guarded, GuardedCompiled)
    quotes = [i for i, t in enumerate(guarded.vocab.bytes) if t.startswith(b'"')]  # each one ends the item "a"
    allowed = [{i for i in quotes if int(bitmask[k, i // 32]) >> (i % 32) & 1} for k in range(2)]
    assert not allowed[0] and allowed[1]
    state = rows[0].cursor
    state.rollback(1)  # the cursor re-reads the text before the last token; "a" still repeats after it
    assert state.accept(prefix[-1:]) and not state.accept_text('"')
