"""Where a chat's time to first token goes, prefix cache off vs on (issue 25): streamed TTFT through a running
scheduler for a 1,000-token shared system prompt, with the short prefill's CUDA graph on and off, and a
synchronized breakdown of the cached path (lookup, the prefix's KV gathered, the prefill, the store) plus
the torch profiler's top ops. JSON on stdout; the profiler tables beside ``--out``.

    python bench/scripts/ttft_profile.py --arch qwen2.5-7b --device cuda --out /tmp/ttft-profile.json
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time

import torch

from typedlm.testing.archs import bench_engine
from typedlm.bench.prefix_cache import stream_ttft, system_prompt
from typedlm.generate.scheduler import Scheduler
from typedlm.runner import prefix_cache, short_prefill, static_forwards

TIMED = [(prefix_cache.PrefixCache, "match"), (prefix_cache.Match, "kv"), (prefix_cache.PrefixCache, "insert"),
         (static_forwards.StaticForwards, "prefill"), (static_forwards.StaticForwards, "_extend"), (short_prefill.ShortPrefill, "run")]


def synced(engine, times):
    """Wrap TIMED with synchronized timers (the wrappers add a sync each: attribution, not the real total)."""
    saved = []
    for cls, name in TIMED:
        fn = getattr(cls, name)
        saved.append((cls, name, fn))

        def wrap(*a, _fn=fn, _key=f"{cls.__name__}.{name}", **k):
            engine.sync()
            t0 = time.perf_counter()
            out = _fn(*a, **k)
            engine.sync()
            times[_key].append(time.perf_counter() - t0)
            return out
        setattr(cls, name, wrap)
    return saved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default=None)
    ap.add_argument("--model", default="default")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--system-tokens", type=int, default=1000)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    engine = bench_engine(a.arch, a.model, device=a.device)
    cache = engine.runner.prefix_cache
    limit = cache.limit_bytes or 1 << 30
    sched = Scheduler(engine, max_batch=4).start()
    kv = engine.runner.forwards(sched.kv)
    sysmsg = system_prompt(engine, a.system_tokens)
    n = [0]

    def chat(system=True):
        n[0] += 1
        msgs = ([{"role": "system", "content": sysmsg}] if system else []) + \
            [{"role": "user", "content": f"Question {n[0]}: can you help me with my card?"}]
        return stream_ttft(engine, sched, msgs)

    for _ in range(3):
        chat()
    out = {"model": engine.name, "device": str(engine.device), "ttft_s": {}}

    def series(label, system=True):
        got = [chat(system) for _ in range(a.reps)]
        out["ttft_s"][label] = {"median": statistics.median(t for t, _ in got), "all": [t for t, _ in got],
                                "cached_tokens": got[-1][1]}

    for short in (True, False):
        kv.short.enabled = short and engine.device.type == "cuda"
        tag = "short-graph" if kv.short.enabled else "eager"
        cache.set_limit(0)
        series(f"off/{tag}")
        series(f"short prompt, no system/{tag}", system=False)
        cache.set_limit(limit)
        chat()
        series(f"on/{tag}")
        times = collections.defaultdict(list)
        saved = synced(engine, times)
        series(f"on, synced parts/{tag}")
        for cls, name, fn in saved:
            setattr(cls, name, fn)
        out[f"parts_ms/{tag}"] = {k: round(1e3 * statistics.median(v), 3) for k, v in times.items()}
        acts = [torch.profiler.ProfilerActivity.CPU]
        if engine.device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as p:
            chat()
        table = p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        if engine.device.type == "cuda":
            table += "\n" + p.key_averages().table(sort_by="self_cuda_time_total", row_limit=15)
        if a.out:
            with open(a.out.replace(".json", f"-{tag}.txt"), "w") as f:
                f.write(table)
    sched.stop()
    print(json.dumps(out, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
