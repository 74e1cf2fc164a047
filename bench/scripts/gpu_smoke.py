"""GPU smoke check of the foundation: constrained generation on a random-weight real architecture.

Run on the lent H200 (see docs/benchmarks.md)."""

import json
import sys
import time

import torch

from typedlm.generate import generate
from typedlm.testing.archs import random_engine

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-0.5b"
t0 = time.perf_counter()
engine = random_engine(arch, device="cuda")
print(f"{arch}: built in {time.perf_counter() - t0:.1f}s, vocab {engine.tokenizer_vocab_size}/{engine.model_vocab_size}")
schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
          "maximum": 999}, "tag": {"enum": ["a", "b", "c"]}}, "required": ["ok", "n", "tag"]}
out = []
for seed in range(5):
    r = generate("hello", engine=engine, json_schema=schema, seed=seed, max_tokens=300)
    out.append({"seed": seed, "finish": r.finish_reason, "valid": r.schema_valid, "tokens": r.completion_tokens,
                "tok_per_s": r.completion_tokens / r.timings["decode"] if r.timings["decode"] else None})
    assert r.schema_valid, r.to_dict()
r = generate("hello", engine=engine, max_tokens=256, temperature=1.0, seed=0)
out.append({"free_tokens": r.completion_tokens, "tok_per_s": r.completion_tokens / r.timings["decode"]})
print(json.dumps({"arch": arch, "device": torch.cuda.get_device_name(0), "runs": out}, indent=1))
