"""The second grammar engine (llguidance, ``typedlm/grammar/backends/llguidance.py``): the option, what it takes from the
normalizer, that its matcher fills the same bitmask layout and reads the core form as xgrammar does, and
that ``auto`` falls back to xgrammar where llguidance cannot read the core form exactly."""

import json

import numpy as np
import pytest

from typedlm import config
from typedlm.errors import ConstraintError, GrammarCompileError
from typedlm.generate import generate
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.backends import NotForEngine
from typedlm.grammar.backends.llguidance import LLGuidanceFiller
from typedlm.grammar.controller import GrammarRow, accepts_text
from typedlm.grammar.spec import make_constraint

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6, "pattern": "^[a-z]+$"},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2}},
          "required": ["name", "n"]}


@pytest.fixture(scope="module")
def engines(tiny):
    """One compiler per engine over the tiny engine's tokenizer (padded vocabulary)."""
    return {e: Grammars(tiny.grammars.tokenizer_info, engine=e) for e in ("xgrammar", "llguidance", "auto")}


def _compile(grammars, schema, **kw):
    return grammars.compile(make_constraint(json_schema=schema, any_whitespace=False, **kw))[0]


def test_engine_names_are_checked(tiny, monkeypatch):
    from typedlm.engine import grammar_options

    with pytest.raises(ConstraintError, match="xgrammar, llguidance, auto"):
        make_constraint(json_object=True, engine="guidance")
    with pytest.raises(GrammarCompileError, match="'outlines'"):
        Grammars(tiny.grammars.tokenizer_info, engine="outlines")
    monkeypatch.setattr(config, "_CURRENT", [config.resolve(env={"TYPEDLM_GRAMMAR_ENGINE": "LLGuidance"})])
    assert Grammars(tiny.grammars.tokenizer_info, **grammar_options(config.settings())).engine == "llguidance"


def test_auto_takes_llguidance_where_it_reads_the_core_form_and_xgrammar_elsewhere(engines):
    assert _compile(engines["auto"], SCHEMA).engine == "llguidance"
    contains = {"type": "array", "contains": {"const": 1}, "minContains": 2}  # our EBNF counter: xgrammar's
    assert _compile(engines["auto"], contains).engine == "xgrammar"
    with pytest.raises(NotForEngine, match="llguidance"):
        _compile(engines["llguidance"], contains)


@pytest.mark.parametrize("fmt,good,bad", [
    ("idn-email", ["a.b+c@x-y.io", "j@k", '"a b"@x.io', '"a\\"b"@x.io'], ["a..b@x.io", "a@x.y", "a@-x.io", "@x.io",
                                                                      '"a"b"@x.io', "é@x.io"]),
    ("uuid", ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000", "123e4567-e89b"]),
])
def test_xgrammars_own_formats_are_the_same_regex_for_llguidance(engines, fmt, good, bad):
    """email (a dot-atom or quoted local part) and uuid, as xgrammar reads them."""
    schema = {"type": "string", "format": fmt}
    compiled = {e: _compile(engines[e], schema) for e in ("xgrammar", "llguidance")}
    for text in good:
        assert all(accepts_text(c, json.dumps(text)) for c in compiled.values()), text
    for text in bad:
        assert not accepts_text(compiled["llguidance"], json.dumps(text)), text


def test_a_grammar_with_no_json_value_is_not_llguidances(engines):
    """Measured: llguidance builds {"$ref": "#"} and fails only at the first mask; compile computes it."""
    with pytest.raises(NotForEngine, match="no JSON value"):
        _compile(engines["llguidance"], {"$ref": "#"}, strict=False)


def test_the_engine_is_part_of_the_cache_key(engines):
    g = engines["xgrammar"]
    plain = _compile(g, SCHEMA)
    forced = g.compile(make_constraint(json_schema=SCHEMA, any_whitespace=False, engine="llguidance"))[0]
    assert plain.engine == "xgrammar" and forced.engine == "llguidance"


CASES = [  # (schema, strict, text, accepted)
    (SCHEMA, True, '{"name":"abc","n":5}', True),
    (SCHEMA, True, '{"name":"abc","n":5,"tags":["x","y"]}', True),
    (SCHEMA, True, '{"name":"abcdefg","n":5}', False),  # maxLength beside a pattern
    (SCHEMA, True, '{"name":"aBc","n":5}', False),
    (SCHEMA, True, '{"n":5,"name":"abc"}', False),  # key order is the schema's
    (SCHEMA, True, '{"name":"abc","n":100}', False),
    (SCHEMA, True, '{"name":"abc","n":5,"z":1}', False),  # strict: no other keys
    (SCHEMA, False, '{"name":"abc","n":5,"z":1}', True),
    (SCHEMA, True, '{"name":"abc","n":5,"tags":["x","y","x"]}', False),
    ({"type": "string", "pattern": "^\\S$"}, True, '"a"', True),
    ({"type": "string", "pattern": "^\\S$"}, True, '"\ufeff"', False),  # ECMA \s has U+FEFF, Rust's not
    ({"type": "string", "pattern": "^\\d$"}, True, '"\u0663"', False),  # ECMA \d is ASCII, Rust's Unicode
    ({"type": "string", "pattern": "^[\\S]+$"}, True, '"ab"', True),
    ({"type": "string", "pattern": "^[\\S]+$"}, True, '"a b"', False),
    ({"type": "string", "pattern": "^[^\\D]$"}, True, '"7"', True),
    ({"type": "string", "pattern": "^[^\\D]$"}, True, '"x"', False),
    ({"type": "string", "pattern": "b"}, True, '"abc"', True),  # a pattern searches
    ({"type": "string", "minLength": 2}, True, '"\\n"', False),  # an escape is one character
    ({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
     True, '{"x-a":1}', True),
    ({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
     True, '{"y-x-a":1}', False),
    ({"type": "array", "prefixItems": [{"type": "integer"}]}, True, "[1,2]", False),
    ({"type": "array", "prefixItems": [{"type": "integer"}]}, False, "[1,2]", True),
]


@pytest.mark.parametrize("schema,strict,text,accepted", CASES)
def test_both_engines_read_the_core_form_alike(engines, schema, strict, text, accepted):
    for name in ("xgrammar", "llguidance"):
        compiled = _compile(engines[name], schema, strict=strict)
        assert compiled.engine == name
        assert accepts_text(compiled, text) is accepted, (name, text)


def test_length_bounded_strings_escapes_by_engine(engines):
    """llguidance counts a JSON escape as the one character it stands for; our EBNF for xgrammar counts
    lengths alone as a repetition of raw characters, no escape (``strings.py``: an escape inside a
    counted repetition leaves xgrammar no cached mask), stricter and sound, like xgrammar's own."""
    schema = {"type": "string", "maxLength": 2}
    llg, xg = _compile(engines["llguidance"], schema), _compile(engines["xgrammar"], schema)
    assert accepts_text(llg, '"\\n\\""')
    assert not accepts_text(llg, '"\\n\\"a"')
    assert not accepts_text(xg, '"\\n\\""') and not accepts_text(xg, '"a\\n"')
    assert accepts_text(xg, '"ab"') and not accepts_text(xg, '"abc"')
    # no count, no loss: a pattern alone keeps its escapes on both engines
    for compiled in (_compile(engines["llguidance"], {"type": "string", "pattern": "."}),
                     _compile(engines["xgrammar"], {"type": "string", "pattern": "."})):
        assert accepts_text(compiled, '"a\\nb"')


def _allowed(row: GrammarRow) -> set[int]:
    bits = np.unpackbits(row.bitmask[row.index].numpy().view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits).tolist())


def test_both_engines_fill_the_same_bitmask_layout(tiny, engines):
    """Along one walk of an enum schema, llguidance allows a non-empty subset of the ids xgrammar allows
    (the same ids where the text is free; where it is forced, llguidance allows only the tokens that start
    its canonical tokenization: ``{"`` and not ``{``), stop ids alike, padded ids never, in the same
    ``[1, ceil(V/32)]`` int32 row."""
    schema = {"type": "object", "properties": {"k": {"enum": ["alpha", "beta"]}}, "required": ["k"],
              "additionalProperties": False}
    rows = {e: GrammarRow(_compile(engines[e], schema), vocab_size=tiny.model_vocab_size, stop_ids=tiny.stop_ids)
            for e in ("xgrammar", "llguidance")}
    same = 0
    for step in range(40):
        for r in rows.values():
            r.fill()
        a, b = (_allowed(r) for r in rows.values())
        assert b and b <= a, step
        same += a == b
        assert rows["xgrammar"].state() == rows["llguidance"].state()
        assert max(a) < tiny.tokenizer_vocab_size
        if rows["xgrammar"].state() != "open":
            break
        tok = min(b - tiny.stop_ids)
        assert all(r.accept(tok) for r in rows.values())
    assert rows["llguidance"].state() == "complete" and same >= 2


@pytest.mark.parametrize("any_whitespace", [True, False])
def test_llguidance_rows_decode_valid_json_on_a_random_model(tiny, any_whitespace):
    import jsonschema

    for seed in range(6):
        r = generate("x", engine=tiny, json_schema=SCHEMA, seed=seed, max_tokens=400, grammar_engine="llguidance",
                     any_whitespace=any_whitespace, jump_forward=seed % 2 == 1)
        assert r.finish_reason == "stop", (seed, r.text)
        jsonschema.validate(json.loads(r.text), SCHEMA)


def test_jump_forward_string_is_the_forced_text(engines):
    m = _compile(engines["llguidance"], {"type": "object", "properties": {"key": {"const": 1}},
                                         "required": ["key"]}).new_state()
    assert m.jump_string() == '{"key":1}'


def test_a_request_picks_its_engine(tiny_client, model):
    import openai

    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}
    for engine in ("llguidance", "auto", "xgrammar"):
        r = tiny_client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                                response_format=fmt, max_tokens=200, seed=1,
                                                extra_body={"grammar_engine": engine})
        assert r.choices[0].finish_reason == "stop", engine
        import jsonschema
        jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
    with pytest.raises(openai.BadRequestError, match="grammar_engine"):
        tiny_client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                            response_format=fmt, extra_body={"grammar_engine": "outlines"})


def test_cli_flag_names_a_bad_engine():
    from typer.testing import CliRunner

    from typedlm.cli import app

    res = CliRunner().invoke(app, ["generate", "hi", "--json-object", "--grammar-engine", "outlines"])
    assert res.exit_code == 2 and "xgrammar, llguidance, auto" in res.output


def test_a_batch_mixes_engines_and_each_row_equals_its_single_run(tiny):
    """Rows of both engines share one batched bitmask (``GrammarBatch`` fills xgrammar's rows in one call
    and llguidance's one by one): greedy batched output equals each row run alone, and each is valid."""
    import jsonschema

    from typedlm.generate import SamplingParams, build_sequence, finish_result
    from typedlm.generate.scheduler import run_batch

    from tests.support.reference_loop import run_sequence

    params = SamplingParams(max_tokens=60, temperature=0)
    cs = [make_constraint(json_schema=SCHEMA, any_whitespace=False, engine=e)
          for e in ("llguidance", "xgrammar", "llguidance")] + [None]
    prompts = ["Hello", "Write JSON", "x y z", "free text"]

    def seqs():
        return [build_sequence(tiny, tiny.encode_prompt(prompt=p), params, c) for p, c in zip(prompts, cs)]

    solo = []
    for seq in seqs():
        run_sequence(tiny, seq)
        solo.append(finish_result(seq))
    batched = run_batch(tiny, seqs(), max_batch=4)
    for c, a, b in zip(cs, solo, batched):
        assert b.token_ids == a.token_ids and b.text == a.text
        if c is not None and b.finish_reason == "stop":
            jsonschema.validate(json.loads(b.text), SCHEMA)


def test_llguidance_rows_fill_in_one_batched_call_and_decode_valid_json(tiny, monkeypatch):
    """A batch of llguidance rows (sampled, seeded) through the scheduler's decode loop: every mask comes
    from the one batched fill per step (``LLGuidanceFiller.fill``, never a ``GrammarRow.fill``),
    each row finishes valid JSON of its schema, and each equals its own single run (no mask bleed)."""
    import jsonschema

    from typedlm.generate import SamplingParams, build_sequence, finish_result
    from typedlm.generate.scheduler import run_batch
    from typedlm.grammar import controller

    from tests.support.reference_loop import run_sequence

    other = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1,
             "maxItems": 3}
    schemas = [SCHEMA, other, SCHEMA, other, SCHEMA]
    cs = [make_constraint(json_schema=s, any_whitespace=False, engine="llguidance") for s in schemas]
    params = [SamplingParams(max_tokens=300, temperature=1.0, seed=40 + i) for i in range(len(cs))]

    def seqs():
        return [build_sequence(tiny, tiny.encode_prompt(prompt=f"row {i}"), p, c)
                for i, (p, c) in enumerate(zip(params, cs))]

    solo = []
    for seq in seqs():
        run_sequence(tiny, seq)
        solo.append(finish_result(seq))
    batched_calls, single_calls = [], []
    real_batch, real_fill = LLGuidanceFiller.fill, controller.GrammarRow.fill
    monkeypatch.setattr(LLGuidanceFiller, "fill",
                        lambda self, ms, *a: (batched_calls.append(len(ms)), real_batch(self, ms, *a))[1])
    monkeypatch.setattr(controller.GrammarRow, "fill", lambda self: (
        single_calls.append(self) if not self.filled else None, real_fill(self))[1])
    batched = run_batch(tiny, seqs(), max_batch=len(cs))
    assert not single_calls and max(batched_calls) == len(cs)
    for schema, a, b in zip(schemas, solo, batched):
        assert b.finish_reason == "stop", b.text
        jsonschema.validate(json.loads(b.text), schema)
        assert b.token_ids == a.token_ids


def test_the_batched_fill_writes_each_rows_own_mask(engines, tiny):
    """Rows in different states (one dead after a refused token) filled in one call into chosen rows of a
    shared bitmask: the same masks as row by row, the dead row empty, the other rows untouched."""
    import torch

    compiled = _compile(engines["llguidance"], SCHEMA)
    ms = [compiled.new_state() for _ in range(4)]
    assert ms[1].accept_text('{"name":"ab"') and ms[2].accept_text('{"name":"abc","n":1')
    assert not ms[3].accept([min(tiny.stop_ids)])
    words = (tiny.model_vocab_size + 31) // 32
    one, many = (torch.full((6, words), -1, dtype=torch.int32) for _ in range(2))
    for m, i in zip(ms, [0, 2, 3, 5]):
        m.fill_mask(one, i)
    ms[0].filler.fill(ms, many, [0, 2, 3, 5])
    assert torch.equal(one, many)
    assert not many[5].any() and many[1].eq(-1).all() and many[4].eq(-1).all()
    assert len({tuple(many[i].tolist()) for i in (0, 2, 3)}) == 3
