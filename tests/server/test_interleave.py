"""Decide beside generation: a decision's forwards interleave with decode steps instead of stalling them.

At the scheduler: every forward of a stepwise decision waits for a decode step (the stream gains a token
between any two of them) and the decision equals the one computed alone; the control, the old exclusive
block, lets at most the step already under way finish. Over HTTP: a /v1/decide request and a stream both
progress, and the answer is the one `decide` gives alone.
"""

import asyncio
import json
import threading
import time

import httpx
import pytest

from typedlm.decide import decide, presets
from typedlm.generate.api import build_sequence
from typedlm.generate.sampling import SamplingParams
from typedlm.generate.scheduler import Request, Scheduler
from typedlm.grammar.spec import make_constraint
from typedlm.server.app import create_app
from typedlm.server.interleave import SteppedEngine, resolve_decide_mode, run_stepwise
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server

PRESET = "content_moderation"
LONG = {"regex": "[a-z]{5000}"}  # a stream that outlasts the decision


def context(p) -> str:
    return " ".join(p["examples"] * 2)  # a few hundred tokens: many prefill chunks


def same_decision(got: dict, alone: dict) -> None:
    assert got["value"] == alone["value"]
    for name, f in alone["fields"].items():
        for k, prob in f["probabilities"].items():
            assert got["fields"][name]["probabilities"][k] == pytest.approx(prob, abs=1e-3), (name, k)


@pytest.fixture
def streaming(tiny):
    """A scheduler decoding one long row; yields (scheduler, token arrival times)."""
    sched = Scheduler(tiny).start()
    times: list[float] = []
    seq = build_sequence(tiny, tiny.encode_prompt(prompt="go"), SamplingParams(max_tokens=4000, temperature=0),
                         make_constraint(**LONG))
    req = sched.submit(Request(seq=seq, on_event=lambda ev: times.append(time.perf_counter())))
    while len(times) < 2:
        time.sleep(0.01)
    yield sched, times
    sched.cancel(req)
    sched.stop()


def test_every_stepwise_forward_waits_for_a_decode_step(tiny, streaming, no_prefix_cache):
    sched, times = streaming
    p = presets.load(PRESET)
    stepped = SteppedEngine(tiny, sched, max_chunk=32)
    assert stepped.busy()
    t0 = time.perf_counter()
    got = decide(p["schema"], context(p), engine=stepped, max_rows=2).to_dict()
    t1 = time.perf_counter()
    during = sum(t0 < t < t1 for t in times)
    assert got["usage"]["prompt_tokens"] > 4 * 32 and stepped.forwards > 8
    assert stepped.step_s > 0 and stepped.token_s > 0 and 1 <= stepped.chunk() <= 32
    assert during >= stepped.forwards - 1, (during, stepped.forwards)
    same_decision(got, decide(p["schema"], context(p), engine=tiny).to_dict())


def test_control_exclusive_decision_stalls_the_stream(tiny, streaming):
    sched, times = streaming
    p = presets.load(PRESET)

    def timed():  # on the engine thread: its own start and end, free of the caller's wake-up lag
        t0 = time.perf_counter()
        decide(p["schema"], context(p), engine=tiny)
        return t0, time.perf_counter()

    t0, t1 = sched.call(timed).result()
    assert t1 - t0 > 0.01 and sum(t0 < t < t1 for t in times) == 0


def test_run_stepwise_without_streams(tiny):
    """No stream: the prefill goes whole, rows go `row_chunk` per pass; the decision is unchanged."""
    sched = Scheduler(tiny).start()
    try:
        p = presets.load(PRESET)
        got = asyncio.run(run_stepwise(tiny, sched, decide, p["schema"], context(p), prefill_chunk=32, row_chunk=2))
        alone = decide(p["schema"], context(p), engine=tiny)
        assert got.usage["passes"] == -(-got.usage["rows"] // 2) > alone.usage["passes"]
        same_decision(got.to_dict(), alone.to_dict())
    finally:
        sched.stop()


def test_parallel_forwards_run_beside_the_steps_not_between(tiny, streaming, monkeypatch, no_prefix_cache):
    """Parallel mode: no decide forward is queued on the engine thread, the stream keeps decoding while
    the decision runs on its own thread, and the decision is the one computed alone."""
    sched, times = streaming
    p = presets.load(PRESET)
    queued = []
    real_call = sched.call
    monkeypatch.setattr(sched, "call", lambda fn, *a, **kw: queued.append(fn) or real_call(fn, *a, **kw))
    stepped = SteppedEngine(tiny, sched, max_chunk=32, parallel=True)
    t0 = time.perf_counter()
    got = decide(p["schema"], context(p), engine=stepped).to_dict()
    t1 = time.perf_counter()
    assert stepped.forwards >= 2 and queued == []
    assert sum(t0 < t < t1 for t in times) >= 2, "the stream decoded while the decision ran"
    same_decision(got, decide(p["schema"], context(p), engine=tiny).to_dict())


def test_auto_mode_is_parallel_only_with_a_spare_cpu_core(tiny, monkeypatch):
    import torch

    monkeypatch.setattr("os.cpu_count", lambda: torch.get_num_threads() + 1)
    assert resolve_decide_mode("auto", tiny) == "parallel"
    monkeypatch.setattr("os.cpu_count", lambda: torch.get_num_threads())
    assert resolve_decide_mode("auto", tiny) == "interleaved"
    assert resolve_decide_mode("exclusive", tiny) == "exclusive"
    with pytest.raises(ValueError, match="decide_mode must be one of"):
        ServerConfig(decide_mode="sometimes")


@pytest.mark.parametrize("mode", ["interleaved", "parallel", "sliced"])
def test_http_decide_and_stream_both_progress(tiny, mode):
    p, raw = presets.load(PRESET), presets.raw(PRESET)
    with live_server(create_app(tiny, ServerConfig(warmup=False, decide_chunk_tokens=32, decide_mode=mode))) as url:
        assert httpx.get(url + "/ready").json()["decide_mode"] == mode
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        times, started = [], threading.Event()

        def stream():
            body = {"model": model, "messages": [{"role": "user", "content": "write"}], "stream": True,
                    "max_tokens": 1500, "temperature": 0, "structured_outputs": LONG}
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                        times.append(time.monotonic())
                        started.set()

        t = threading.Thread(target=stream)
        t.start()
        assert started.wait(60)
        t0 = time.monotonic()
        d = httpx.post(url + "/v1/decide", json={"schema": raw["schema"], "context": context(p)}, timeout=300)
        t1 = time.monotonic()
        t.join(300)
    assert d.status_code == 200, d.text
    assert times[-1] > t1, "the stream outlasted the decision"
    assert sum(t0 < x < t1 for x in times) >= 10
    alone = decide(p["schema"], context(p), engine=tiny).to_dict()
    same_decision(d.json(), alone)
    if mode == "interleaved":
        assert d.json()["usage"]["passes"] > alone["usage"]["passes"], "rows were scored in smaller passes"
    else:
        assert d.json()["usage"]["passes"] == alone["usage"]["passes"], "parallel, sliced: the decision's own passes"
