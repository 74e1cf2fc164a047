"""Random weights for a real model's config: ``python3 bench/scripts/random_weights.py SRC OUT``.

SRC is a Hugging Face model folder without (or with) its weights: ``config.json`` and the tokenizer files are
copied to OUT, and the weights are drawn at random (seed 0) for that exact architecture. Speed does not
depend on weight values, so a device run that cannot carry the weights (more than 64 MiB) benchmarks the
real shape with the real tokenizer. Used for ``itl-cpu-quiet.md`` (the default model's shape on the lent
machine's quiet CPU)."""

import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

src, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
for f in src.iterdir():
    if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".gguf")):
        shutil.copy(f, out / f.name)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src), torch_dtype=torch.float32)
model.save_pretrained(out)
print(f"{out}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, random weights")
