"""Tiny random-weight models with a real tokenizer: fast, honest grammar tests and benchmarks.

A random-weight model samples anything its mask allows, so whatever it emits under a grammar must
still be valid: the best test a grammar layer can get.
"""

from __future__ import annotations

from tokenizers import AddedToken
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from .. import models
from ..config import Settings
from ..engine import Engine, engine_from_model
from ..errors import TypedLMError

# ids the tiny model's lm_head has beyond the tokenizer (padded vocabularies exist: Qwen, Llama-3)
PAD_ROWS = 64


def default_tokenizer():
    """The default model's real tokenizer (SmolLM2: ByteLevel BPE, 49,152 ids, ChatML template)."""
    path = models.local_dir(models.resolve(models.DEFAULT_REF), progress=False)
    return AutoTokenizer.from_pretrained(path)


def tiny_llama(tokenizer, *, layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
               pad_rows: int = PAD_ROWS, seed: int = 0, max_positions: int = 4096):
    cfg = LlamaConfig(vocab_size=len(tokenizer) + pad_rows, hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      max_position_embeddings=max_positions, tie_word_embeddings=False,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # make the random logits spread out, like a real model's
        model.lm_head.weight.normal_(0.0, 0.5)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def tiny_engine(*, seed: int = 0, settings: Settings | None = None, **kw) -> Engine:
    tok = default_tokenizer()
    return engine_from_model(tiny_llama(tok, seed=seed, **kw), tok, name="tiny-random-llama", device="cpu",
                             dtype=torch.float32, settings=settings)


def save_tiny(directory, engine: Engine | None = None) -> str:
    """Write the tiny model as a HF directory (what ``--model DIR`` loads); returns the directory."""
    engine = engine or tiny_engine()
    if engine.backend != "torch":
        raise TypedLMError(f"save_tiny writes a torch engine's model (this engine runs on {engine.backend})")
    engine.model.save_pretrained(directory)
    engine.tokenizer.save_pretrained(directory)
    return str(directory)


# A Qwen3-style chat template: tools rendered by the template (Hermes <tool_call> format), tool
# results as <tool_response>, and ``enable_thinking: false`` closing an empty <think> block.
QWEN3_STYLE_TEMPLATE = """
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>{% for tool in tools %}
{{ tool | tojson }}{% endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'user' %}<|im_start|>user
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.content %}{{ message.content }}{% endif %}{% for tc in message.tool_calls or [] %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif %}"""

REASONING_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")


def reasoning_tokenizer():
    """The default tokenizer + Qwen3's added (non-special) tokens and a Qwen3-style template."""
    tok = default_tokenizer()
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in REASONING_TOKENS])
    tok.chat_template = QWEN3_STYLE_TEMPLATE
    return tok


def tiny_reasoning_engine(*, seed: int = 0, **kw) -> Engine:
    """A tiny random-weight model that looks like a Qwen3 reasoning model to typedlm (mechanics only)."""
    tok = reasoning_tokenizer()
    return engine_from_model(tiny_llama(tok, seed=seed, **kw), tok, name="tiny-reasoning", device="cpu",
                             dtype=torch.float32)
