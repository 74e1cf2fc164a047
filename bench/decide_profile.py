"""Where ``decide_many``'s time goes on the lent GPU (issue 11): random-weight architecture, bf16, preset
support_triage, N contexts of ~400 tokens, near-tie rescoring off (the batched scoring alone). Prints the
wall time, the CUDA time the profiler saw, and the top kernels / ops by CUDA time (torch.profiler).

    python bench/decide_profile.py qwen2.5-7b 16 > bench/results/profile-decide-many-h200.txt
"""

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from typedlm.bench.decide import contexts
from typedlm.bench.models import random_engine
from typedlm.decide import decide_many, presets, ties

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 16
engine = random_engine(arch, device="cuda")
schema = presets.load("support_triage")["schema"]
ctxs = contexts(engine, n, 400)
ties.DRIFT_NATS.update({k: -1.0 for k in ties.DRIFT_NATS})
decide_many(schema, ctxs, engine=engine)
decide_many(schema, ctxs, engine=engine)
torch.cuda.synchronize()
t0 = time.perf_counter()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    ds = decide_many(schema, ctxs, engine=engine)
    torch.cuda.synchronize()
wall = time.perf_counter() - t0
u = ds[0].usage
print(f"# decide_many profile: {arch} bf16 on {torch.cuda.get_device_name(0)}, {n} contexts of ~400 tokens, "
      f"{len(schema.fields)} fields, packing {u['packing']}, shared prefix {u['shared_prefix_tokens']} tokens, "
      f"prompt tokens {sum(d.usage['prompt_tokens'] for d in ds)}, row-tree tokens per context {u['scored_tokens']}")
print(f"# wall {wall:.3f} s under the profiler; command: python bench/decide_profile.py {arch} {n}")
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=70))

# the dense mask's price: one 2048-token forward, causal kernel (no mask) vs the same causal pattern as a
# 4-D additive mask (the kernel shared-prefix passes run on)
from typedlm.decide.score import _additive  # noqa: E402

ids = torch.randint(0, 10000, (1, 2048), device="cuda")
mask = _additive(torch.ones(2048, 2048, dtype=torch.bool).tril_(), engine)
with torch.inference_mode():
    for name, kw in (("causal kernel, no mask", {}), ("4-D additive mask", {"attention_mask": mask})):
        for _ in range(2):
            engine.runner.forward(ids, logits_to_keep=1, **kw)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            engine.runner.forward(ids, logits_to_keep=1, **kw)
        torch.cuda.synchronize()
        print(f"# 2048-token forward, {name}: {(time.perf_counter() - t0) / 5 * 1e3:.1f} ms")
