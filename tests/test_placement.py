"""Quantized and large models (typedlm.placement): the CPU-runnable paths on the tiny model. The CUDA paths
(bitsandbytes 4/8-bit, GGUF at bf16, device_map="auto") are checked by bench/scripts/gpu_quant_check.py."""

import importlib.util
import json
import shutil

import pytest
import torch

from typedlm import placement
from typedlm.engine import engine_from_model, load_engine
from typedlm.errors import ModelLoadError
from typedlm.testing import default_tokenizer, tiny_llama


def with_config(src, dst, **extra):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(extra)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed")
def test_quantized_checkpoint_without_its_package_names_the_extra(tiny_dir, tmp_path):
    d = with_config(tiny_dir, tmp_path / "q", quantization_config={"quant_method": "bitsandbytes", "load_in_4bit": True})
    with pytest.raises(ModelLoadError, match=r"bitsandbytes-quantized: install typedlm's \[quant-bnb\] extra"):
        load_engine(str(d), device="cpu")


def test_quantized_checkpoint_gets_a_device_map(tiny_dir, tmp_path):
    d = with_config(tiny_dir, tmp_path / "q", quantization_config={"quant_method": "fp8"})
    kw = placement.load_kwargs(str(d), torch.device("cpu"), torch.float32)
    assert kw == {"dtype": torch.float32, "device_map": {"": "cpu"}}
    assert placement.load_kwargs(str(tiny_dir), torch.device("cpu"), torch.float32) == {"dtype": torch.float32}


def test_a_quantized_model_is_never_moved():
    """A model whose config carries a quantization_config keeps its weights where and as they are: the
    fp32 tiny model stays fp32 although bf16 was asked (a plain model is cast, the control)."""
    plain = engine_from_model(tiny_llama(default_tokenizer()), default_tokenizer(), name="plain", dtype=torch.bfloat16)
    assert next(plain.model.parameters()).dtype == torch.bfloat16
    model = tiny_llama(default_tokenizer())
    model.config.quantization_config = {"quant_method": "bitsandbytes", "load_in_8bit": True}
    model.to = lambda *a, **k: pytest.fail(".to() called on a quantized model")
    e = engine_from_model(model, default_tokenizer(), name="q", dtype=torch.bfloat16)
    assert next(e.model.parameters()).dtype == torch.float32
    # decoding keeps its weights too: the dynamic KV, not StaticKV (which fuses q/k/v in place)
    from typedlm.runner.dynamic_kv import DynamicKV
    from typedlm.runner.static_kv import StaticKV

    assert isinstance(e.runner.decode_cache(2), DynamicKV) and isinstance(plain.runner.decode_cache(2), StaticKV)


def test_a_model_spread_over_devices_is_not_moved():
    model = tiny_llama(default_tokenizer())
    model.hf_device_map = {"model.layers.0": 0, "model.layers.1": 1}
    assert placement.is_placed(model)
    model.hf_device_map = {"": "cpu"}
    assert not placement.is_placed(model)


def test_larger_than_the_gpu_loads_with_device_map_auto(tiny_dir):
    need = placement.weights_bytes(str(tiny_dir), torch.bfloat16, placement.read_config(str(tiny_dir)))
    stored = sum(f.stat().st_size for f in tiny_dir.glob("*.safetensors"))
    assert need == stored // 2  # fp32 on disk, bf16 on the GPU
    cuda = torch.device("cuda", 0)
    small = placement.load_kwargs(str(tiny_dir), cuda, torch.bfloat16, free_bytes=lambda d: need // 2)
    large = placement.load_kwargs(str(tiny_dir), cuda, torch.bfloat16, free_bytes=lambda d: need * 10)
    assert small == {"dtype": torch.bfloat16, "device_map": "auto"} and large == {"dtype": torch.bfloat16}
