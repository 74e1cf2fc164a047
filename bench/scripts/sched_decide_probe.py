"""Does a started Scheduler slow later decisions? A decision with the prefix cache off (the prefix-cache bench's
``decide off``), p50 of ``runs``, at each stage: no scheduler yet; a scheduler started (static KV + its
forwards made); after streamed chats on it (short-prefill graphs, the compiled decode layer run); after it stopped.
Per stage: wall, the device time of the decision (CUDA events), the collector's runs and seconds over them, the Python calls of one decision (cProfile, top
by own time), and on CUDA the kernels of one decision (torch.profiler: count and device time, top by time).
Prints JSON. ``--arch`` a random-weight arch (CUDA), or the tiny test model on the CPU without it.

    python bench/scripts/sched_decide_probe.py [--arch qwen2.5-7b] [--runs 5]
"""

import argparse
import cProfile
import gc
import io
import json
import pstats
import statistics
import time

import torch

from typedlm.bench.prefix_cache import stream_ttft, system_prompt

try:  # the probe runs on the base tree too, where these live in typedlm.bench
    from typedlm.testing.archs import random_engine
    from typedlm.testing.contexts import contexts
except ImportError:
    from typedlm.bench.decide import contexts
    from typedlm.bench.models import random_engine
from typedlm.decide import decide, presets
from typedlm.generate.scheduler import Scheduler
from typedlm.testing import tiny_engine

ap = argparse.ArgumentParser()
ap.add_argument("--arch")
ap.add_argument("--runs", type=int, default=5)
a = ap.parse_args()
if a.arch:
    engine = random_engine(a.arch, device="cuda")
else:
    engine = tiny_engine()
cuda = engine.device.type == "cuda"
schema = presets.load("support_triage")["schema"]
ctx = contexts(engine, a.runs + 3, tokens=100, seed=7)  # the same contexts at every stage
cache = engine.runner.prefix_cache
limit = cache.limit_bytes


GC = {"runs": [0, 0, 0], "s": 0.0}


def _gc(phase, info):
    if phase == "start":
        GC["t0"] = time.perf_counter()
        GC["runs"][info["generation"]] += 1
    else:
        GC["s"] += time.perf_counter() - GC["t0"]


gc.callbacks.append(_gc)


def one(i):
    cache.set_limit(0)
    engine.sync()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)] if cuda else None
    t0 = time.perf_counter()
    if ev:
        ev[0].record()
    decide(schema, ctx[i], engine=engine)
    if ev:
        ev[1].record()
    engine.sync()
    wall = time.perf_counter() - t0
    cache.set_limit(limit)
    return wall, (ev[0].elapsed_time(ev[1]) / 1e3 if ev else None)


def stage(name):
    one(0)  # warm
    GC.update(runs=[0, 0, 0], s=0.0)
    got = [one(1 + i) for i in range(a.runs)]
    gc_runs, gc_s = list(GC["runs"]), GC["s"]
    pr = cProfile.Profile()
    pr.enable()
    one(1)
    pr.disable()
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("tottime").print_stats(12)
    out = {"stage": name, "wall_p50": statistics.median(w for w, _ in got),
           "device_p50": statistics.median(d for _, d in got) if cuda else None,
           "calls": st.total_calls, "gc_runs_by_generation": gc_runs, "gc_s": gc_s,
           "gc_tracked": len(gc.get_objects()), "top_tottime": s.getvalue().splitlines()[-16:]}
    if cuda:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            one(1)
        ka = prof.key_averages()
        out["kernels"] = [{"name": k.key[:80], "count": k.count, "device_ms": k.device_time_total / 1e3}
                          for k in sorted(ka, key=lambda k: -k.device_time_total)[:12]]
        out["ops_by_host"] = [{"name": k.key[:80], "count": k.count, "host_ms": k.cpu_time_total / 1e3}
                              for k in sorted(ka, key=lambda k: -k.self_cpu_time_total)[:12]]
    print(json.dumps({k: v for k, v in out.items() if k != "top_tottime"}), flush=True)
    return out


results = {"device": str(engine.device), "invariant": engine.runner.invariant}
decide(schema, ctx[-1], engine=engine)  # the neutral prior
results["none"] = stage("no scheduler")
sched = Scheduler(engine, max_batch=4).start()
results["started"] = stage("scheduler started")
sysmsg = system_prompt(engine, 1000)
for u in ("Hello", "Question 99: can you help me with my card?", "Question 98: can you help me with my card?"):
    stream_ttft(engine, sched, [{"role": "system", "content": sysmsg}, {"role": "user", "content": u}])
results["after_chats"] = stage("after chats")
sched.stop()
results["stopped"] = stage("scheduler stopped")
print(json.dumps(results, indent=1))
