"""Where a model's weights go, and whether typedlm may move them.

- **Quantized checkpoints** (``quantization_config`` in ``config.json``: bitsandbytes 4/8-bit, AWQ, GPTQ)
  load through transformers' own quantizer with ``device_map`` placing them; ``.to()`` is never called on
  such a model (bitsandbytes refuses it, AWQ/GPTQ kernels are bound to their device). The package the
  method needs must be installed: the extras ``quant-bnb``, ``quant-awq``, ``quant-gptq``; a missing one is
  a ``ModelLoadError`` naming the extra, before any weight is read.
- **Larger than one GPU**: on CUDA, weights (safetensors bytes, rescaled to the target dtype) above 90 % of
  the GPU's free memory load with ``device_map="auto"`` (accelerate spreads layers over the GPUs); a model
  spread over several devices is not moved either.
- **GGUF**: converted once to an HF directory (:func:`typedlm.models.convert_gguf`); on CUDA it loads at
  bf16 (the default CUDA dtype), so the GPU never holds an fp32 copy.
- Everything else: ``model.to(device, dtype)``.

GPU-only paths are checked by ``bench/scripts/gpu_quant_check.py`` on the lent machine; the CPU paths by
``tests/test_placement.py``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Callable

import torch

from .errors import ModelLoadError

# quant_method -> (importable modules, any one will do; the extra that installs one)
QUANT_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "bitsandbytes": (("bitsandbytes",), "quant-bnb"),
    "awq": (("awq",), "quant-awq"),
    "gptq": (("gptqmodel", "auto_gptq"), "quant-gptq"),
}
FIT_FRACTION = 0.9


def read_config(path: str) -> dict:
    f = Path(path) / "config.json"
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {}


def weights_bytes(path: str, dtype: torch.dtype, config: dict) -> int:
    """Bytes the weights take at ``dtype`` (from the safetensors files and the checkpoint's stored dtype)."""
    stored = getattr(torch, str(config.get("torch_dtype") or config.get("dtype") or "float32"), torch.float32)
    on_disk = sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))
    return on_disk * torch.finfo(dtype).bits // torch.finfo(stored).bits


def _free_bytes(device: torch.device) -> int:
    return torch.cuda.mem_get_info(device)[0]


def load_kwargs(path: str, device: torch.device, dtype: torch.dtype, *,
                free_bytes: Callable[[torch.device], int] = _free_bytes) -> dict:
    """Keyword arguments for ``from_pretrained``: ``dtype`` always; ``device_map`` for a quantized
    checkpoint (on ``device``) or, on CUDA, for a model larger than the GPU's free memory (``"auto"``)."""
    config = read_config(path)
    quant = config.get("quantization_config")
    if quant:
        method = str(quant.get("quant_method", "")).lower()
        if method in QUANT_PACKAGES:
            modules, extra = QUANT_PACKAGES[method]
            if not any(importlib.util.find_spec(m) for m in modules):
                raise ModelLoadError(f"model at {path} is {method}-quantized: install typedlm's [{extra}] extra "
                                     f"(needs {' or '.join(modules)})")
        return {"dtype": dtype, "device_map": {"": str(device)}}
    if device.type == "cuda" and weights_bytes(path, dtype, config) > FIT_FRACTION * free_bytes(device):
        return {"dtype": dtype, "device_map": "auto"}
    return {"dtype": dtype}


def is_placed(model) -> bool:
    """Quantized, or spread over several devices: transformers/accelerate placed it; never ``.to()`` it."""
    if getattr(model, "hf_quantizer", None) is not None or getattr(model, "is_quantized", False):
        return True
    if getattr(getattr(model, "config", None), "quantization_config", None):
        return True
    return len(set((getattr(model, "hf_device_map", None) or {}).values())) > 1


def place(model, device: torch.device, dtype: torch.dtype):
    return model if is_placed(model) else model.to(device=device, dtype=dtype)
