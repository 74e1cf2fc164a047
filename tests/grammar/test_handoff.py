"""The default engine, ``handoff`` (``typedlm/grammar/backends/handoff.py``): a new schema's rows start on
llguidance at once and move to xgrammar once its background compile is ready, replaying what they accepted;
outputs are valid before, across and after the move; rollback and the jump-forward string work across it;
a disk-cache hit skips llguidance; a failed background compile keeps llguidance; and both engines agree on
accept/reject over the official suite (the move's premise: a history llguidance accepted, xgrammar accepts)."""

import json
import random
import threading

import jsonschema
import pytest
import torch

from typedlm import config
from typedlm.generate import generate
from typedlm.grammar.backends import handoff, masks
from typedlm.grammar.backends.handoff import settle
from typedlm.grammar.compiler import DEFAULT_ENGINE, Grammars
from typedlm.grammar.controller import accepts_text
from typedlm.grammar.spec import make_constraint

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6, "pattern": "^[a-z]+$"},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2}},
          "required": ["name", "n"], "additionalProperties": False}


def _schema(tag: str) -> dict:
    """SCHEMA, made a new cache key (a fresh compile) by ``tag``."""
    return {**SCHEMA, "description": tag}


def _constraint(schema=SCHEMA, **kw):
    return make_constraint(json_schema=schema, any_whitespace=False, **kw)


@pytest.fixture
def gate(monkeypatch):
    """Background compiles wait until ``gate.set()`` (rows stay on llguidance until then)."""
    event = threading.Event()
    later = handoff.HandoffBackend._later

    def held(self, c, prepare):
        assert event.wait(60)
        return later(self, c, prepare)

    monkeypatch.setattr(handoff.HandoffBackend, "_later", held)
    yield event
    event.set()


def _mask(state, vocab: int) -> torch.Tensor:
    m = masks.allocate(1, vocab)
    state.fill_mask(m, 0)
    return m


def _walk(state, vocab, tokens, rng, steps: int, *, decode) -> list[int]:
    """Up to ``steps`` random allowed tokens (a stop ends it), accepted into ``state``."""
    out = []
    for _ in range(steps):
        allowed = torch.nonzero(_unpack(_mask(state, vocab), vocab)).flatten().tolist()
        assert allowed, decode(tokens + out)
        t = rng.choice(allowed)
        assert state.accept([t])
        if t in state.stop_ids:
            break
        out.append(t)
    return out


def _unpack(mask: torch.Tensor, vocab: int) -> torch.Tensor:
    bits = (mask[0].unsqueeze(1) >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.flatten()[:vocab].bool()


def test_handoff_is_the_default(tiny):
    assert DEFAULT_ENGINE == "handoff" and config.Settings().grammar_engine == "handoff"
    assert Grammars(tiny.grammars.tokenizer_info).engine == "handoff"


def test_rows_start_on_llguidance_and_move_to_xgrammar(tiny, gate):
    info = tiny.grammars.tokenizer_info
    compiled, _ = Grammars(info).compile(_constraint(_schema("move")))
    state = compiled.new_state()
    assert state.engine == "llguidance"
    assert state.accept_text('{"name":"ab')
    before = _mask(state, info.vocab_size)
    gate.set()
    assert settle(compiled, 30)[0] == "xgrammar"
    after = _mask(state, info.vocab_size)  # the fill moves the row: its history replayed into xgrammar
    assert state.engine == "xgrammar" and torch.equal(before, after)
    assert state.accept_text('c","n":7}') and state.can_end()
    assert compiled.new_state().engine == "xgrammar"  # new rows start there
    assert accepts_text(compiled, '{"name":"x","n":1}') and not accepts_text(compiled, '{"name":"X","n":1}')


def test_generated_outputs_are_valid_before_and_after_the_move(tiny, gate):
    """The tiny random-weight model under the default engine: on llguidance (background held), then on
    xgrammar (after the move); every output is valid per jsonschema."""
    before = _schema("gen")
    outs = [generate("Give JSON.", engine=tiny, json_schema=before, seed=s, max_tokens=60, any_whitespace=False)
            for s in range(3)]
    gate.set()
    compiled, _ = tiny.grammars.compile(_constraint(before, strict=True))
    assert settle(compiled, 30)[0] == "xgrammar"
    outs += [generate("Give JSON.", engine=tiny, json_schema=before, seed=s, max_tokens=60, any_whitespace=False)
             for s in range(3, 6)]
    for out in outs:
        if out.finish_reason == "stop":
            jsonschema.validate(json.loads(out.text), SCHEMA)


def test_random_walks_across_the_move_stay_valid(tiny, gate):
    """Random allowed tokens: some on llguidance, the move mid-output, the rest on xgrammar."""
    info, tok = tiny.grammars.tokenizer_info, tiny.tokenizer
    compiled, _ = Grammars(info).compile(_constraint(_schema("walk")))
    rng = random.Random(0)
    states = [compiled.new_state() for _ in range(6)]
    prefixes = [_walk(s, info.vocab_size, [], rng, 4 + i, decode=tok.decode) for i, s in enumerate(states)]
    assert {s.engine for s in states} == {"llguidance"}
    gate.set()
    settle(compiled, 30)
    for s, prefix in zip(states, prefixes):
        rest = _walk(s, info.vocab_size, prefix, rng, 200, decode=tok.decode)
        assert s.engine == "xgrammar"
        if s.is_terminated():
            jsonschema.validate(json.loads(tok.decode(prefix + rest)), SCHEMA)


def test_rollback_and_jump_forward_across_the_move(tiny, gate):
    info = tiny.grammars.tokenizer_info
    compiled, _ = Grammars(info).compile(_constraint(_schema("rollback")))
    ref, _ = Grammars(info, engine="xgrammar").compile(_constraint(_schema("rollback")))
    state = compiled.new_state()
    ids = tiny.tokenizer.encode('{"name":"abc","n":1', add_special_tokens=False)
    assert state.accept(ids)
    state.rollback(3)  # on llguidance
    gate.set()
    settle(compiled, 30)
    mask = _mask(state, info.vocab_size)
    assert state.engine == "xgrammar"
    state.rollback(2)  # past tokens accepted before the move: replayed, so xgrammar holds them
    other = ref.new_state()
    assert other.accept(ids[:-5])
    assert torch.equal(_mask(state, info.vocab_size), _mask(other, info.vocab_size))
    assert state.jump_string() == other.jump_string()
    assert state.accept(ids[-5:-3]) and torch.equal(_mask(state, info.vocab_size), mask)
    fresh = compiled.new_state()
    assert fresh.accept_text('{"name":"abc"') and fresh.jump_string() == ',"n":'


def test_a_disk_cache_hit_skips_llguidance(tiny, tmp_path, monkeypatch):
    info = tiny.grammars.tokenizer_info
    first = Grammars(info, cache_dir=tmp_path, cache_min_s=0.0)
    compiled, _ = first.compile(_constraint(_schema("disk")))
    first.flush()
    assert settle(compiled, 30)[0] == "xgrammar"
    calls = []
    fresh = Grammars(info, cache_dir=tmp_path, cache_min_s=0.0)
    llg = fresh._backend("llguidance")
    monkeypatch.setattr(llg, "compile", lambda *a: calls.append(a))
    hit, _ = fresh.compile(_constraint(_schema("disk")))
    assert calls == [] and hit.new_state().base.__class__.__module__.endswith("xgrammar")


def test_a_failed_background_compile_keeps_llguidance(tiny):
    """Past xgrammar's size cap: rows stay on llguidance, and still reject what the schema forbids."""
    g = Grammars(tiny.grammars.tokenizer_info, max_grammar_bytes=50)
    compiled, _ = g.compile(_constraint(_schema("too large")))
    engine, _, running = settle(compiled, 30)
    assert engine == "llguidance" and not running
    assert accepts_text(compiled, '{"name":"ab","n":3,"tags":["x"]}')
    assert not accepts_text(compiled, '{"name":"ab","n":300}')


def test_what_llguidance_cannot_read_waits_for_xgrammar(tiny):
    schema = {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "maxContains": 1}
    compiled, _ = Grammars(tiny.grammars.tokenizer_info).compile(_constraint(schema))
    assert compiled.new_state().base.__class__.__module__.endswith("xgrammar")
    assert accepts_text(compiled, "[1,6,2]") and not accepts_text(compiled, "[6,7]")


def test_without_llguidance_handoff_is_xgrammar(tiny, monkeypatch):
    import typedlm.grammar.backends as backends

    real = backends.load

    def no_llg(name, info, **kw):
        if name == "llguidance":
            raise ImportError("llguidance")
        return real(name, info, **kw)

    monkeypatch.setattr(backends, "load", no_llg)
    monkeypatch.setattr("typedlm.grammar.compiler.load", no_llg)
    compiled, _ = Grammars(tiny.grammars.tokenizer_info).compile(_constraint(_schema("no llg")))
    assert compiled.new_state().base.__class__.__module__.endswith("xgrammar")


def test_both_engines_agree_on_the_official_suite(tiny):
    """Every 3rd 2020-12 case both engines compile: each test instance (its renderings) accepted by both or
    by neither, so a row's llguidance history replays into xgrammar; measured exceptions: valid JSON
    pointers with an escaped character, which our xgrammar grammar refuses (a false negative: such a row
    stays on llguidance, see the next test), never an invalid instance either engine accepts."""
    from typedlm.bench import jsonschema_suite as suite
    from typedlm.grammar.renderings import renderings
    from typedlm.grammar.schema import prepare_schema

    registry = suite.remotes_registry()
    engines = {e: Grammars(tiny.grammars.tokenizer_info, engine=e, schema_registry=registry)
               for e in ("xgrammar", "llguidance")}
    compared, differ = 0, []
    for case in suite.load_suite(suite.DEFAULT_SUITE)[::3]:
        c = make_constraint(json_schema=case.schema, strict=False, any_whitespace=False)
        try:
            both = {e: g.compile(c)[0] for e, g in engines.items()}
            core = prepare_schema(c.value, registry=registry, automata=False)
        except Exception:  # noqa: BLE001 - refused by either engine: nothing to compare
            continue
        for t in case.tests:
            for text in renderings(t["data"], core, True):
                got = {e: accepts_text(g, text) for e, g in both.items()}
                compared += 1
                if len(set(got.values())) > 1:
                    differ.append((case.file, t["valid"], text, got))
    known = [d for d in differ if d[:2] == ("optional/format/json-pointer.json", True) and not d[3]["xgrammar"]]
    assert compared > 500 and differ == known and len(known) <= 3, "\n".join(map(repr, differ))


def test_a_history_xgrammar_refuses_stays_on_llguidance(tiny, gate):
    """The one measured disagreement (a JSON pointer with an escaped backslash): the row does not move."""
    info = tiny.grammars.tokenizer_info
    compiled, _ = Grammars(info).compile(_constraint({"type": "string", "format": "json-pointer"}))
    state = compiled.new_state()
    assert state.accept_text('"/i\\\\j')
    gate.set()
    settle(compiled, 30)
    _mask(state, info.vocab_size)
    assert state.engine == "llguidance" and compiled.new_state().engine == "xgrammar"
    assert state.accept_text('"') and state.can_end()
