"""Model references, the Engine handle, device/dtype selection."""

import dataclasses

import pytest
import torch

from typedlm import config, models
from typedlm.engine import load_engine, pick_device, pick_dtype
from typedlm.errors import ModelLoadError, TypedLMError
from typedlm.generate import generate


def test_load_engine_from_hf_directory(tiny_dir, tiny):
    e = load_engine(str(tiny_dir), progress=False)
    assert e.device.type == "cpu" and e.dtype == torch.float32
    assert e.tokenizer_vocab_size == len(e.tokenizer) == 49152
    assert e.model_vocab_size == 49152 + 64  # padded lm_head is recorded, not confused with the tokenizer
    assert e.stop_ids == tiny.stop_ids and e.stop_ids
    assert e.chat.has_template
    assert e.grammars.tokenizer_info.vocab_size == e.model_vocab_size
    r = generate("x", engine=e, regex=r"[0-9]{3}", seed=0)
    assert len(r.text) == 3 and r.text.isdigit()
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'name'"):
        e.name = "other"  # frozen handle


def test_stop_ids_include_generation_config_eos_list(tiny):
    from typedlm.engine import engine_from_model
    from typedlm.testing import tiny_llama

    model = tiny_llama(tiny.tokenizer)
    model.generation_config.eos_token_id = [tiny.tokenizer.eos_token_id, 0]
    e = engine_from_model(model, tiny.tokenizer, name="t")
    assert e.stop_ids == {tiny.tokenizer.eos_token_id, 0}
    assert sorted(e.grammars.tokenizer_info.stop_token_ids) == [0, tiny.tokenizer.eos_token_id]


def test_chat_messages_use_the_template(tiny):
    ids = tiny.encode_prompt(messages=[{"role": "user", "content": "hi"}])
    text = tiny.tokenizer.decode(ids)
    assert "<|im_start|>user\nhi<|im_end|>" in text and text.rstrip().endswith("<|im_start|>assistant")
    with pytest.raises(TypedLMError, match="exactly one"):
        tiny.encode_prompt(prompt="a", messages=[{"role": "user", "content": "b"}])


def test_missing_paths_and_bad_refs_are_clear(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        models.resolve(str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelLoadError, match="does not exist"):
        models.resolve("./no/such/dir")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="config.json"):
        models.resolve(str(tmp_path / "empty"))


def test_hub_id_offline_names_the_id_and_the_way_out(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError) as e:
        load_engine("some-org/some-model-that-is-not-cached", progress=False)
    msg = str(e.value)
    assert "some-org/some-model-that-is-not-cached" in msg and "local path" in msg


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "_CURRENT", [config.resolve(env={"XDG_CACHE_HOME": str(tmp_path)})])
    assert models.cache_dir() == tmp_path / "typedlm"
    r = models.resolve("default")
    assert r.converted_dir == tmp_path / "typedlm" / "models" / models.DEFAULT_NAME
    assert not r.is_converted and models.list_cached() == []


def test_default_model_is_converted_and_listed():
    r = models.resolve("default")
    models.local_dir(r, progress=False)  # converts once (the tiny fixture already did)
    assert r.is_converted
    assert any(row["name"] == models.DEFAULT_NAME for row in models.list_cached())


def test_device_and_dtype_selection():
    assert pick_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_dtype(None, torch.device("cpu")) == torch.float32
    assert pick_dtype(None, torch.device("cuda")) == torch.bfloat16
    assert pick_dtype("fp16", torch.device("cpu")) == torch.float16
    with pytest.raises(ModelLoadError, match="bad dtype"):
        pick_dtype("int3", torch.device("cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="no CUDA"):
            pick_device("cuda")


@pytest.mark.real_model
def test_default_model_generates_valid_structured_output(real):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                               "population_millions": {"type": "number", "minimum": 0,
                                                                       "maximum": 100}},
              "required": ["city", "population_millions"], "additionalProperties": False}
    msgs = [{"role": "user", "content": "Name a large city and its population in millions, as JSON."}]
    r = generate(messages=msgs, engine=real, json_schema=schema, temperature=0, max_tokens=80)
    assert r.finish_reason == "stop" and r.schema_valid, r.to_dict()
    code = generate(messages=[{"role": "user", "content": "Invent a product code."}], engine=real,
                            regex=r"[A-Z]{3}-\d{4}", temperature=0)
    import re
    assert re.fullmatch(r"[A-Z]{3}-\d{4}", code.text)
    pick = generate(messages=[{"role": "user", "content": "Is water wet? Answer yes or no."}], engine=real,
                            choice=["yes", "no"], temperature=0)
    assert pick.text in ("yes", "no")


def test_engine_sizes_resolved_once(tiny):
    # tiny_llama: 2 layers, 2 KV heads, head_dim 64 / 4 = 16, fp32: K and V per layer
    assert tiny.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4 and tiny.attn_heads == 4
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'kv_bytes_per_token'"):
        tiny.kv_bytes_per_token = 1
