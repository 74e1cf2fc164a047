"""Where ``decide_many``'s time goes on the lent GPU (issues 11, 20): random-weight architecture, bf16, preset
support_triage, N contexts of ~400 tokens (batch-invariant scoring on: the CUDA default). Prints the wall time
without and under the profiler, the top CUDA ops (torch.profiler) and the top host functions (cProfile, by own
time); then the same for a later single decision (the plan prefix read from the prefix cache).

    python bench/scripts/decide_profile.py qwen2.5-7b 64 > profile-decide-many-h200.txt
"""

import cProfile
import io
import pstats
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from typedlm.testing.contexts import contexts
from typedlm.testing.archs import random_engine
from typedlm.bench.timing import cuda_ms
from typedlm.decide import decide, decide_many, presets

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 16
engine = random_engine(arch, device="cuda")
schema = presets.load("support_triage")["schema"]
ctxs = contexts(engine, n, 400)
short = contexts(engine, 40, 100, seed=7)


def host_top(fn, rows: int = 25) -> str:
    pr = cProfile.Profile()
    pr.enable()
    fn()
    torch.cuda.synchronize()
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(rows)
    return buf.getvalue()


def section(name: str, fn, runs: int = 1) -> None:
    wall = cuda_ms(fn, runs)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    print(f"## {name}: wall {wall:.1f} ms (p50 of {runs}, no profiler)")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))
    print(host_top(fn))


ds = decide_many(schema, ctxs, engine=engine)
u = ds[0].usage
print(f"# decide profile: {arch} bf16 on {torch.cuda.get_device_name(0)}, invariant {engine.runner.invariant}, "
      f"{n} contexts of ~400 tokens, {len(schema.fields)} fields, packing {u['packing']}, shared prefix "
      f"{u['shared_prefix_tokens']} tokens, prompt tokens {sum(d.usage['prompt_tokens'] for d in ds)}, row-tree tokens "
      f"per context {u['scored_tokens']}; command: python bench/scripts/decide_profile.py {arch} {n}")
section(f"decide_many x{n}", lambda: decide_many(schema, ctxs, engine=engine))
later = iter(short)
section("later decide (plan prefix cached)", lambda: decide(schema, next(later), engine=engine), runs=5)
