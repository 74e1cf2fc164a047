"""``typedlm bench prefix-cache``: the prefix cache on vs off (runner/prefix_cache.py).

* **decide**: a decision on the preset's schema with a ~100-token context; with the cache, the first call
  after emptying it (a miss) and a later call on another context (the plan prefix read from the cache);
  without it, every call. Target: later / first <= 0.35 (only the context's prefill and the scoring left).
* **chat TTFT**: a chat whose ~``--system-tokens`` system prompt is shared, streamed through a running
  scheduler (the server's engine thread): time from the request (chat template and tokenization included)
  to its first token event, as a streaming client sees it less HTTP; with the cache warm vs without.
  Target: <= 0.3x uncached.
* **decide_many**: ``--many`` contexts per call, field decisions/s, cache warm (the plan prefix) vs off, on the
  same contexts (near ties, rescored one row a pass without batch invariance, vary by context).

Each repetition runs both modes back to back (off, then on), so a loaded machine slows both alike; the
neutral prior is computed once before any timing (it is cached per engine in both modes). ``--invariant
on,off``: the whole bench once per batch-invariant scoring mode (``ModelRunner.set_invariant``; off: near ties
are rescored one row a pass).

CPU (default model):   typedlm bench prefix-cache
GPU (random 7B-class): typedlm bench prefix-cache --arch qwen2.5-7b --device cuda
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Optional

import typer

from ..cliutil import backend_option


def _timed(engine, fn):
    engine.sync()
    t0 = time.perf_counter()
    out = fn()
    engine.sync()
    return time.perf_counter() - t0, out


def system_prompt(engine, tokens: int) -> str:
    """A system prompt of about ``tokens`` tokens (the bundled presets' example texts, repeated)."""
    from ..decide import presets

    pool = " ".join(e.replace("\n", " ") for name in presets.names() for e in presets.load(name)["examples"])
    text = "You are the support assistant of a bank. Policies and past cases follow.\n"
    while len(engine.tokenizer.encode(text)) < tokens:
        text += pool
    ids = engine.tokenizer.encode(text)[:tokens]
    return engine.tokenizer.decode(ids)


def stream_ttft(engine, sched, messages: list[dict]) -> tuple[float, int]:
    """(seconds from the request to its first streamed token, prompt tokens read from the prefix cache)."""
    from ..generate.api import build_sequence
    from ..generate.sampling import SamplingParams
    from ..generate.requests import Request, TokenEvent

    first: list[float] = []
    t0 = time.perf_counter()
    seq = build_sequence(engine, engine.encode_prompt(messages=messages), SamplingParams(max_tokens=1, temperature=0.0),
                         None)
    req = sched.submit(Request(seq=seq, on_event=lambda ev: isinstance(ev, TokenEvent) and not first and
                               first.append(time.perf_counter())))
    req.done.wait(600)
    return first[0] - t0, req.result.cached_tokens


def run_bench(engine, *, preset: str, runs: int, many: int, system_tokens: int, progress=lambda m: None) -> dict:
    from ..decide import decide, decide_many, presets
    from ..generate.scheduler import Scheduler
    from .decide import contexts

    cache = engine.runner.prefix_cache
    limit = cache.limit_bytes or (1 << 30)
    schema = presets.load(preset)["schema"]
    ctx = contexts(engine, 2 * runs + 2 * many * runs + 2, tokens=100, seed=7)
    progress("neutral prior + warm-up")
    sched = Scheduler(engine, max_batch=4).start()  # the server's engine thread; its KV made (weights fused) once
    decide(schema, ctx[-1], engine=engine)  # the neutral prior, computed once (cached per engine in both modes)
    decide(schema, ctx[-2], engine=engine)  # a later call: the CUDA graph of its scoring pass captured before timing
    sysmsg = system_prompt(engine, system_tokens)
    users = [f"Question {i}: can you help me with my card?" for i in range(3 * runs)]
    out = {"decide": {"off": [], "first": [], "later": [], "cached_prompt_tokens": [], "first_timings": [],
                      "later_timings": []},
           "chat": {"off": [], "on": [], "cached_tokens": []}, "decide_many": {"off": [], "on": []}}
    d, c, m = out["decide"], out["chat"], out["decide_many"]

    def chat(u):
        return stream_ttft(engine, sched, [{"role": "system", "content": sysmsg}, {"role": "user", "content": u}])

    for u in ("Hello", "Question 99: can you help me with my card?", "Question 98: can you help me with my card?"):
        chat(u)  # kernels, and the graph of the short prefill's bucket the timed chats take

    for i in range(runs):
        progress(f"repetition {i + 1}/{runs}")
        cache.set_limit(0)  # off (and empty)
        d["off"].append(_timed(engine, lambda: decide(schema, ctx[2 * i], engine=engine))[0])
        c["off"].append(chat(users[3 * i])[0])
        chunk = ctx[2 * runs + 2 * many * i:][:many]
        m["off"].append(_timed(engine, lambda: decide_many(schema, chunk, engine=engine))[0])
        cache.set_limit(limit)  # on, empty
        t, dec = _timed(engine, lambda: decide(schema, ctx[2 * i], engine=engine))
        d["first"].append(t)
        d["first_timings"].append(dec.timings)
        t, dec = _timed(engine, lambda: decide(schema, ctx[2 * i + 1], engine=engine))
        d["later"].append(t)
        d["later_timings"].append(dec.timings)
        d["cached_prompt_tokens"].append(dec.usage["cached_prompt_tokens"])
        chat(users[3 * i + 1])  # warms the system prompt
        t, cached = chat(users[3 * i + 2])
        c["on"].append(t)
        c["cached_tokens"].append(cached)
        m["on"].append(_timed(engine, lambda: decide_many(schema, chunk, engine=engine))[0])
    sched.stop()
    fields = len(schema.fields)
    med = statistics.median
    d["prompt_tokens"] = dec.usage["prompt_tokens"]
    c["prompt_tokens"] = len(engine.encode_prompt(messages=[{"role": "system", "content": sysmsg},
                                                            {"role": "user", "content": users[0]}]))
    summary = {"decide_later_over_first": med(d["later"]) / med(d["first"]),
               "decide_later_over_off": med(d["later"]) / med(d["off"]),
               "chat_ttft_on_over_off": med(c["on"]) / med(c["off"]),
               "many_field_decisions_per_s_off": many * fields / med(m["off"]),
               "many_field_decisions_per_s_on": many * fields / med(m["on"])}
    return {"model": engine.name, "device": str(engine.device), "dtype": str(engine.dtype).replace("torch.", ""),
            "invariant": engine.runner.invariant, "preset": preset, "fields": fields, "runs": runs, "many": many, "system_tokens": system_tokens,
            "prefix_cache_bytes": limit, **out, "summary": summary}


def _part(timings: list[dict], key: str) -> float:
    return statistics.median(t[key] for t in timings)


def to_markdown(r: dict) -> str:
    med = statistics.median
    s, d, c = r["summary"], r["decide"], r["chat"]
    return "\n".join([
        f"# bench prefix-cache: {r['model']} on {r.get('machine', r['device'])} ({r['dtype']}, batch-invariant "
        f"scoring {'on' if r['invariant'] else 'off'})", "",
        f"`{r.get('command', '')}`: {r['runs']} repetitions, each off then on; medians.", "",
        "| measurement | cache off | cache on | ratio | target |", "|---|---|---|---|---|",
        f"| decide, {r['preset']} ({r['fields']} fields, {d['prompt_tokens']} prompt tokens): first / later call, s "
        f"| {med(d['off']):.3f} | {med(d['first']):.3f} / {med(d['later']):.3f} "
        f"(cached {med(d['cached_prompt_tokens']):.0f} tokens) | later/first {s['decide_later_over_first']:.2f} "
        f"| <= 0.35 |",
        f"| decide, on: prefill / scoring of the first call, s | | {_part(d['first_timings'], 'prefill'):.3f} / "
        f"{_part(d['first_timings'], 'scoring'):.3f} | | |",
        f"| decide, on: prefill / scoring of a later call, s | | {_part(d['later_timings'], 'prefill'):.3f} / "
        f"{_part(d['later_timings'], 'scoring'):.3f} | | |",
        f"| chat TTFT (streamed), {c['prompt_tokens']}-token prompt ({r['system_tokens']}-token system), s | {med(c['off']):.3f} "
        f"| {med(c['on']):.3f} (cached {med(c['cached_tokens']):.0f}) | {s['chat_ttft_on_over_off']:.2f} | <= 0.3 |",
        f"| decide_many x{r['many']}, field decisions/s | {s['many_field_decisions_per_s_off']:.1f} "
        f"| {s['many_field_decisions_per_s_on']:.1f} (warm) "
        f"| {s['many_field_decisions_per_s_on'] / s['many_field_decisions_per_s_off']:.2f}x | |", ""])


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @bench_app.command("prefix-cache")
    def bench_prefix_cache(
        model: str = typer.Option("default", "--model", "-m", help="model reference (ignored with --arch)"),
        arch: Optional[str] = typer.Option(None, "--arch", help="random-weight real architecture, e.g. qwen2.5-7b"),
        device: str = typer.Option("auto", "--device"),
        backend: Optional[str] = backend_option(),
        preset: str = typer.Option("support_triage", "--preset"),
        runs: int = typer.Option(3, "--runs", help="repetitions (each: off, then on)"),
        many: int = typer.Option(16, "--many", help="contexts per decide_many call"),
        system_tokens: int = typer.Option(1000, "--system-tokens", help="shared chat system prompt, tokens"),
        prefix_cache_gb: Optional[float] = typer.Option(None, "--prefix-cache-gb", help="cache size when on"),
        out: Optional[Path] = typer.Option(None, "--out", help="write JSON here (and .md beside it)"),
        machine: Optional[str] = typer.Option(None, "--machine", help="machine description for the report"),
        invariant: str = typer.Option("default", "--invariant",
                                      help="batch-invariant scoring: default, on, off, or on,off (once per mode)"),
    ):
        """The prefix cache on vs off: decide first vs later calls, chat TTFT with a shared system prompt,
        decide_many throughput warm."""
        import shlex
        import sys

        from ..cliutil import print_json, user_errors
        from .models import bench_engine
        from ..runner.prefix_cache import configure
        from .decide import _machine

        with user_errors():
            engine = bench_engine(arch, model, device=device, backend=backend)
            configure(engine, prefix_cache_gb)
            if not engine.runner.prefix_cache.enabled:
                raise ValueError("--prefix-cache-gb 0: nothing to compare")
            modes = [m.strip() for m in invariant.split(",")]
            if any(m not in ("default", "on", "off") for m in modes):
                raise ValueError(f"--invariant takes default, on, off or a comma list of them, got {invariant!r}")
            results = []
            for mode in modes:
                if mode != "default":
                    engine.runner.set_invariant(mode == "on")
                results.append(run_bench(engine, preset=preset, runs=runs, many=many, system_tokens=system_tokens,
                                         progress=lambda m: typer.echo(m, err=True)))
        args = sys.argv[sys.argv.index("prefix-cache") + 1:] if "prefix-cache" in sys.argv else []
        for r in results:
            r["machine"] = machine or _machine(engine)
            r["command"] = ("typedlm bench prefix-cache " + shlex.join(args)).strip()
        r = results[0] if len(results) == 1 else {"modes": results}
        print_json(r)
        md = "\n".join(to_markdown(x) for x in results)
        typer.echo(md, err=True)
        if out:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(r, indent=2, ensure_ascii=False) + "\n")
            out.with_suffix(".md").write_text(md)
