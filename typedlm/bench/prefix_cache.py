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

import statistics
import time

from ..decide import decide, decide_many, presets
from ..generate.api import build_sequence
from ..generate.sampling import SamplingParams
from ..generate.requests import Request, TokenEvent
from ..generate.scheduler import Scheduler
from ..runner.compiled import worker_pools
from ..testing.contexts import contexts


def _timed(engine, fn):
    engine.sync()
    t0 = time.perf_counter()
    out = fn()
    engine.sync()
    return time.perf_counter() - t0, out


def system_prompt(engine, tokens: int) -> str:
    """A system prompt of about ``tokens`` tokens (the bundled presets' example texts, repeated)."""
    pool = " ".join(e.replace("\n", " ") for name in presets.names() for e in presets.load(name)["examples"])
    text = "You are the support assistant of a bank. Policies and past cases follow.\n"
    while len(engine.tokenizer.encode(text)) < tokens:
        text += pool
    ids = engine.tokenizer.encode(text)[:tokens]
    return engine.tokenizer.decode(ids)


def stream_ttft(engine, sched, messages: list[dict]) -> tuple[float, int]:
    """(seconds from the request to its first streamed token, prompt tokens read from the prefix cache)."""
    first: list[float] = []
    t0 = time.perf_counter()
    seq = build_sequence(engine, engine.encode_prompt(messages=messages), SamplingParams(max_tokens=1, temperature=0.0),
                         None)
    req = sched.submit(Request(seq=seq, on_event=lambda ev: isinstance(ev, TokenEvent) and not first and
                               first.append(time.perf_counter())))
    req.done.wait(600)
    return first[0] - t0, req.result.cached_tokens


def run_bench(engine, *, preset: str, runs: int, many: int, system_tokens: int, progress=lambda m: None) -> dict:
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
    out["compile_worker_pools"] = worker_pools()
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
