"""``typedlm bench roofline``: the decision pass, a prefill and a decode step as fractions of the device's peaks.

For each case: the median wall time of ``runs`` synchronized calls (after one first call, timed apart: it pays
CUDA-graph captures, compiles and autotuning), the device's busy time in one more call, in a second pass after every
timing (the union of its kernel and copy spans under ``torch.profiler``; CUDA only), the host time the device waits
on (wall - busy), and the achieved TFLOPS and GB/s (:mod:`.cost`: FLOPs and bytes from the model's config) next to
the device's peaks. Cases:

* ``decide``: one decision (preset example, prefix cache off: the whole prompt computed); ``decide cached``: the
  same decision again with the prefix cache on (its prompt read from the cache); ``decide_many xN``: N contexts of
  ~400 tokens (prefix cache off). Near-tie rescoring is off (batched scoring alone, as ``bench decide --many``).
* ``prefill N``: one prompt of N tokens into a static slot (prefix cache off).
* ``decode bB``: one decode step of B rows, each after an N-token prompt.

Warm-up: the static KV of the largest decode batch and every CUDA graph the cases meet (decode and short-prefill
buckets up to N + a margin of columns), timed as ``bench gen`` times it, with the graphs' count and capture spans.
"""

from __future__ import annotations

import contextlib
import platform
import statistics
import time
from typing import Callable

from rich.console import Console
from rich.table import Table
import torch
from torch._dynamo.utils import counters
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from ..decide import presets, ties
from ..decide.api import decide, decide_many, plan_for
from ..runner.static_kv import StaticKV
from ..testing.contexts import contexts
from .cost import Shape, causal_keys, peaks, rates


def union_s(spans: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` spans (overlapping kernels on several streams count once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def device_busy_s(fn: Callable, device: torch.device) -> float | None:
    """Seconds the device is busy (kernels, copies, memsets) during ``fn()``; None off CUDA or when the profiler
    recorded no device activity."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize(device)
    spans = [(e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type == DeviceType.CUDA]
    return union_s(spans) / 1e6 if spans else None  # microseconds; none recorded: not known


@contextlib.contextmanager
def counted_forwards(runner):
    """Count the runner's scoring forwards (calls of its methods that run one) while the block runs: ``n[0]``."""
    n = [0]

    def counting(fn):
        def call(*args, **kwargs):
            n[0] += 1
            return fn(*args, **kwargs)
        return call

    methods = {"score": runner.score, "score_expand": runner.score_expand, "prefill_prefix": runner.prefill_prefix,
               "prefill_prefixes": runner.prefill_prefixes}
    for name, fn in methods.items():
        setattr(runner, name, counting(fn))
    try:
        yield n
    finally:
        for name in methods:
            delattr(runner, name)  # back to the class's methods


@contextlib.contextmanager
def no_rescoring():
    """Near-tie rescoring off (the batched scoring alone is measured)."""
    saved = dict(ties.DRIFT_NATS)
    ties.DRIFT_NATS.update({k: -1.0 for k in saved})
    try:
        yield
    finally:
        ties.DRIFT_NATS.update(saved)


def decision_work(usages: list[dict], reads: int) -> dict:
    """Tokens computed, logit rows, attention pairs and K/V traffic of one ``decide_many`` call from its decisions'
    usage: the shared prefix once (less what the prefix cache gave), each context's own tokens after it, its row
    tree (``scored_tokens``; attention counted as causal over the prompt: an upper estimate for a tree) and the
    lm_head on its ``reads`` read positions; each context's prompt K/V read once."""
    shared = usages[0]["shared_prefix_tokens"]
    cached = [u["cached_prompt_tokens"] for u in usages]
    tokens = keys = 0
    if shared:
        c0 = min(min(cached), shared)
        tokens, keys = shared - c0, causal_keys(c0, shared - c0)
    for u, c in zip(usages, cached):
        n, tree = u["prompt_tokens"], u["scored_tokens"]
        start = max(shared, c)
        tokens += n - start + tree
        keys += causal_keys(start, n - start) + causal_keys(n, tree)
    return {"tokens": tokens, "logit_rows": reads * len(usages), "keys": keys,
            "kv_read": sum(u["prompt_tokens"] for u in usages), "kv_written": tokens}


def _timed(fn: Callable, engine) -> tuple[float, object]:
    engine.sync()
    t0 = time.perf_counter()
    out = fn()
    engine.sync()
    return time.perf_counter() - t0, out


class Meter:
    """Measures cases (``meter(name, fn, work)``), in one of two passes over them: timing (``fn`` once: the first
    call; ``runs`` times: the median wall; ``work(result)`` -> the :func:`decision_work`-style counts plus
    ``forwards`` -> a row of ``rows``) or profiling (``fn`` once, then once under the profiler: ``busy[name]``). The
    profiler's pass comes after every timing: a process that has run it launches kernels more slowly."""

    def __init__(self, engine, shape: Shape, peak, runs: int, profiling: bool = False):
        self.engine, self.shape, self.peak, self.runs, self.profiling = engine, shape, peak, runs, profiling
        self.rows: list[dict] = []
        self.busy: dict[str, float | None] = {}

    def __call__(self, name: str, fn: Callable, work: Callable[[object], dict]) -> None:
        if self.profiling:
            fn()
            self.busy[name] = device_busy_s(fn, self.engine.device)
            return
        first, out = _timed(fn, self.engine)
        walls = []
        for _ in range(self.runs):
            t, out = _timed(fn, self.engine)
            walls.append(t)
        wall = statistics.median(walls)
        w = work(out)
        flops = self.shape.flops(w["tokens"], w["logit_rows"], w["keys"])
        nbytes = self.shape.bytes(w["forwards"], w["kv_read"], w["kv_written"])
        self.rows.append({"case": name, **w, "first_s": first, "wall_s": wall, "device_s": None,
                          "host_wait_s": None, "flops": flops, "bytes": nbytes,
                          **rates(flops, nbytes, wall, self.peak)})

    def add_busy(self, profiled: "Meter") -> None:
        """Each row's device time from the ``profiled`` pass, and the host time the device waited on."""
        for r in self.rows:
            busy = profiled.busy.get(r["case"])
            r["device_s"], r["host_wait_s"] = busy, None if busy is None else max(0.0, r["wall_s"] - busy)


def _decision_cases(meter: Meter, preset: str, many: int) -> None:
    engine = meter.engine
    p = presets.load(preset)
    schema, context = p["schema"], p["examples"][0]
    reads = sum(len(r.reads) for r in plan_for(schema, engine).rows)
    cache = engine.runner.prefix_cache
    counted: list[int] = []

    def call(fn):
        def run():
            with counted_forwards(engine.runner) as n:
                out = fn()
            counted.append(n[0])
            return out
        return run

    def work(ds):
        return {**decision_work([d.usage for d in ds], reads), "forwards": counted[-1]}

    one = call(lambda: [decide(schema, context, engine=engine)])
    batch = contexts(engine, many, 400)
    limit = cache.limit_bytes
    with no_rescoring():
        cache.set_limit(0)
        try:
            meter("decide", one, work)
            meter(f"decide_many x{many}", call(lambda: decide_many(schema, batch, engine=engine)), work)
        finally:
            cache.set_limit(limit)
        if cache.enabled:
            meter("decide cached", one, work)


def _generation_cases(meter: Meter, kv, tokens: int, batches: tuple[int, ...]) -> None:
    runner, cache, runs = meter.engine.runner, meter.engine.runner.prefix_cache, meter.runs
    ids = torch.randint(1000, 20000, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    limit = cache.limit_bytes
    cache.set_limit(0)
    try:
        def prefill():
            slot = kv.acquire()
            try:
                return runner.prefill(kv, [ids], [slot])
            finally:
                kv.release(slot)

        meter(f"prefill {tokens}", prefill, lambda _: {
            "tokens": tokens, "logit_rows": 1, "keys": causal_keys(0, tokens), "forwards": 1, "kv_read": 0,
            "kv_written": tokens})
        for b in batches:
            slots = [kv.acquire() for _ in range(b)]
            try:
                runner.prefill(kv, [ids] * b, slots)
                ctx = tokens + 1 + runs // 2  # the timed steps' median context
                meter(f"decode b{b}", lambda: runner.run(kv, [[ids[0]]] * b, slots), lambda _: {
                    "tokens": b, "logit_rows": b, "keys": b * (ctx + 1), "forwards": 1, "kv_read": b * ctx,
                    "kv_written": b})
            finally:
                for s in slots:
                    kv.release(s)
    finally:
        cache.set_limit(limit)


def _cases(meter: Meter, kv, tokens: int, batches: tuple[int, ...], decisions: bool, preset: str, many: int,
           errors: dict) -> None:
    _generation_cases(meter, kv, tokens, batches)
    if decisions:
        try:
            _decision_cases(meter, preset, many)
        except Exception as e:  # noqa: BLE001 - written down: the generation cases and the warm-up still report
            errors["decisions"] = f"{type(e).__name__}: {e}"


def warm_up(engine, batch: int, columns: int) -> tuple[object, dict]:
    """The static KV of ``batch`` rows and its CUDA graphs up to ``columns`` -> (kv, what it took: seconds, graphs
    captured, graphs ``torch.compile`` made (dynamo's count), each part's capture spans)."""
    runner = engine.runner
    compiled = counters["stats"]["unique_graphs"]
    t0 = time.perf_counter()
    kv = runner.decode_cache(batch)
    runner.capture(kv, columns)
    took = time.perf_counter() - t0
    out = {"warmup_s": took, "graphs": 0, "compiled_graphs": counters["stats"]["unique_graphs"] - compiled}
    if not isinstance(kv, StaticKV):  # the dynamic cache: no graphs
        return kv, out
    fw = runner.forwards(kv)
    for part, graphs in {"decode": fw.graphs, "short_prefill": fw.short.graphs}.items():
        if len(graphs):
            spans = sorted(graphs.spans.values())
            out["graphs"] += len(graphs)
            out[part] = {"graphs": len(graphs), "capture_s": graphs.capture_s, "slowest_s": spans[-1],
                         "median_s": statistics.median(spans),
                         "spans": {f"{b}x{c}": t for (b, c), t in graphs.spans.items()}}  # rows|tokens x columns
    return kv, out


def device_name(engine) -> str:
    if engine.device.type == "cuda":
        return torch.cuda.get_device_name(engine.device)
    return platform.processor() or platform.machine()


def bench_roofline(engine, *, tokens: int = 512, runs: int = 5, many: int = 16, batches: tuple[int, ...] = (1, 32),
                   preset: str = "support_triage", decisions: bool = True, progress=None) -> dict:
    """Every case of the module's docstring on ``engine`` (a torch engine; ``decisions``: the decision cases too)
    -> the results JSON."""
    if engine.backend != "torch":
        raise ValueError(f"bench roofline runs on the torch backend (this engine runs on {engine.backend})")
    if tokens < 1 or runs < 1 or many < 1 or min(batches) < 1:
        raise ValueError("--tokens, --runs, --many and --batch must be >= 1")
    say = progress or (lambda m: None)
    name = device_name(engine)
    peak = peaks(name, engine.dtype)
    shape = Shape.of(engine.model.config, engine.model_vocab_size, engine.dtype)
    say("warm-up: static KV and CUDA graphs")
    kv, warm = warm_up(engine, max(batches), tokens + runs + 8)
    if tokens + runs + 8 > kv.max_len:
        raise ValueError(f"--tokens {tokens} does not fit the static KV ({kv.max_len} tokens)")
    say(f"warm-up {warm['warmup_s']:.1f} s, {warm['graphs']} graphs, {warm['compiled_graphs']} compiled; "
        "the cases")
    timing, errors = Meter(engine, shape, peak, runs), {}
    _cases(timing, kv, tokens, batches, decisions, preset, many, errors)
    if engine.device.type == "cuda":
        say("the cases again under the profiler")
        profiled = Meter(engine, shape, peak, runs, profiling=True)
        _cases(profiled, kv, tokens, batches, decisions, preset, many, errors)
        timing.add_busy(profiled)
    rows = sorted(timing.rows, key=lambda r: not r["case"].startswith("decide"))  # decisions first
    return {"bench": "roofline", "model": engine.name, "device": str(engine.device), "device_name": name,
            "dtype": str(engine.dtype).replace("torch.", ""),
            "peaks": None if peak is None else {"tflops": peak[0] / 1e12, "gb_s": peak[1] / 1e9},
            "weight_bytes": shape.weight_bytes, "kv_bytes_per_token": shape.kv_bytes_per_token,
            "flops_per_token": shape.flops(1, 0, 0), "tokens": tokens, "runs": runs,
            "invariant": engine.runner.capabilities.invariant, "warmup": warm, "results": rows, "errors": errors}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{1e3 * x:.2f}"


def print_table(res: dict) -> None:
    p = res["peaks"]
    t = Table(title=f"bench roofline: {res['model']} on {res['device_name']} ({res['dtype']}); peaks "
                    + (f"{p['tflops']:.0f} TFLOPS, {p['gb_s']:.0f} GB/s" if p else "n/a"))
    for col in ("case", "tokens", "first s", "wall ms", "device ms", "host wait ms", "TFLOPS", "of peak", "GB/s",
                "of peak BW"):
        t.add_column(col, justify="left" if col == "case" else "right")
    for r in res["results"]:
        t.add_row(r["case"], str(r["tokens"]), f"{r['first_s']:.2f}", _ms(r["wall_s"]), _ms(r["device_s"]),
                  _ms(r["host_wait_s"]), f"{r['tflops']:.3f}", _pct(r["tflops_fraction"]), f"{r['gb_s']:.1f}",
                  _pct(r["gb_s_fraction"]))
    con = Console(stderr=True, width=150)
    con.print(t)
    for part, err in res["errors"].items():
        con.print(f"{part} failed: {err}")
    w = res["warmup"]
    con.print(f"warm-up (static KV + CUDA graph capture): {w['warmup_s']:.2f} s, {w['graphs']} graphs, "
              f"{w['compiled_graphs']} compiled " + ", ".join(
        f"({k}: {v['graphs']}, slowest capture {v['slowest_s']:.2f} s)" for k, v in w.items() if isinstance(v, dict)))
