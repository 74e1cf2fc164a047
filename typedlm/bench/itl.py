"""``typedlm bench itl``: inter-token latency of streaming requests, alone and beside decide traffic.

A real server on loopback (the app ``typedlm serve`` runs, one server for every run: only its step budget
changes between runs) serves ``--streams`` streaming chat requests at once, ``--rounds`` times over; every SSE
content chunk's arrival time is recorded per stream and the gaps between consecutive chunks are the
inter-token latencies (the first chunk, TTFT, is not one). ``--decide-clients`` clients post ``/v1/decide``
back to back. Runs:

- ``alone``        the streams only
- ``decide-alone`` the decide clients only, until ``--decisions`` decisions: the decision's own latency
- ``beside``       streams + decide clients: each decision's forwards are work of the engine's steps, within the
                   step token budget (:mod:`typedlm.generate.work`); ``beside@N``: with a budget of N tokens,
                   ``beside@N/F``: and at most F work forwards a step (``step_forwards``)

Reported per run: p50 / p90 / p99 / max ITL, the engine's steps (``steps``: the host's wall time of each step, from
the start of one to the start of the next, p50 / p99 of steps that carried work and of those that did not), decisions that started and ended while the streams ran and their
p50 / p99 latency, and the ratios against the targets: streams' p99 vs ``alone`` (target <= 1.2) and decide
p50 vs ``decide-alone`` (target <= 2). A decision that fails fails the bench (its status and body), never
silently. ``--threads`` sets torch's intra-op threads (on a CPU shared with other
work, one thread avoids OpenMP barrier stalls that dwarf the model's own cost).
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time

from rich.console import Console
from rich.table import Table
import torch

from ..decide import presets
from ..server.app import create_app
from ..server.state import ServerConfig
from ..server.testing import live_server
from .grammar import _pct

MODES = ("alone", "decide-alone", "beside")
TARGETS = {"p99_vs_alone": 1.2, "decide_p50_vs_alone": 2.0}  # issue 20, item 5


def _stream(url: str, bodies: list[dict], arrivals: list[list[float]]) -> None:
    import httpx  # optional extra: server

    for body in bodies:  # one request after another: each its own list of arrivals
        got = []
        arrivals.append(got)
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if line.startswith("data: {") and any(c.get("delta", {}).get("content")
                                                      for c in json.loads(line[6:])["choices"]):
                    got.append(time.perf_counter())


class DecideFailed(RuntimeError):
    """A decide client got an error: the run's decide numbers would be wrong (the bench stops)."""


def _decider(url: str, body: dict, stop: threading.Event, spans: list[tuple[float, float]],
             errors: list[str]) -> None:
    import httpx  # optional extra: server

    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            r = httpx.post(url + "/v1/decide", json=body, timeout=600)
        except Exception as e:  # noqa: BLE001 - written down, raised by the run
            errors.append(f"{type(e).__name__}: {e}")
            return
        if r.status_code != 200:
            errors.append(f"HTTP {r.status_code}: {r.text[:500]}")
            return
        spans.append((t0, time.perf_counter()))


def _joined(deciders: list[threading.Thread], errors: list[str]) -> None:
    for t in deciders:
        t.join()
    if errors:
        raise DecideFailed(f"{len(errors)} decide client(s) failed; first: {errors[0]}")


def _latencies(spans: list[tuple[float, float]]) -> dict:
    lat = [b - a for a, b in spans]
    return {"decisions": len(lat),
            "decide_s": {k: round(_pct(lat, q), 4) for k, q in (("p50", .5), ("p99", .99))} if lat else None}


def _clients_alone(url: str, body: dict, clients: int, decisions: int) -> list[tuple[float, float]]:
    stop, spans, errors = threading.Event(), [], []
    deciders = [threading.Thread(target=_decider, args=(url, body, stop, spans, errors)) for _ in range(clients)]
    for t in deciders:
        t.start()
    while len(spans) < decisions and all(t.is_alive() for t in deciders):
        time.sleep(0.01)
    stop.set()
    _joined(deciders, errors)
    return spans


def _decide_alone(url: str, body: dict, clients: int, decisions: int) -> dict:
    """The decide clients with no stream (the baseline of ``decide p50 vs alone``), and one client alone (``solo``:
    one decision at a time; with several clients their decisions also wait for each other)."""
    t0 = time.perf_counter()
    spans = _clients_alone(url, body, clients, decisions)
    wall = time.perf_counter() - t0
    solo = _clients_alone(url, body, 1, max(2, decisions // 2)) if clients > 1 else spans
    return {"mode": "decide-alone", "itl_ms": None, **_latencies(spans), "wall_s": round(wall, 2),
            "solo": _latencies(solo)}


def _beside(url: str, model: str, mode: str, *, streams: int, rounds: int, max_tokens: int, decide_clients: int,
            decide_body: dict) -> dict:
    bodies = [[{"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 1.0, "seed": 1000 * r + i,
                "messages": [{"role": "user", "content": f"Tell me a long story about the number {i}."}]}
               for r in range(rounds)] for i in range(streams)]
    arrivals = [[] for _ in bodies]
    stop, spans, errors = threading.Event(), [], []
    deciders = [threading.Thread(target=_decider, args=(url, decide_body, stop, spans, errors))
                for _ in range(decide_clients if mode != "alone" else 0)]
    for t in deciders:
        t.start()
    if deciders:
        time.sleep(0.2)  # decide traffic is under way when the streams start
    threads = [threading.Thread(target=_stream, args=(url, b, a)) for b, a in zip(bodies, arrivals)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = time.perf_counter()
    stop.set()
    _joined(deciders, errors)
    itl = [b - a for per_stream in arrivals for arr in per_stream for a, b in zip(arr, arr[1:])]
    inside = [(a, b) for a, b in spans if a >= t0 and b <= t1]  # started and ended beside the streams
    return {"mode": mode, "chunks": sum(len(a) for s in arrivals for a in s), "itl_count": len(itl),
            "itl_ms": {k: round(1e3 * _pct(itl, q), 2) for k, q in (("p50", .5), ("p90", .9), ("p99", .99), ("max", 1))},
            **_latencies(inside), "wall_s": round(t1 - t0, 2)}


class StepClock:
    """Wall time between the starts of consecutive engine steps, split by whether the step carried decisions' work
    (the bench wraps the scheduler instance's ``step`` and ``work.take``; nothing in the scheduler changes)."""

    def __init__(self, sched):
        self.sched, self.spans, self._t, self._work = sched, ([], []), None, False
        step, take = sched.step, sched.work.take

        def timed_step():
            now = time.perf_counter()
            if self._t is not None and now - self._t < 0.5:  # an idle wait between steps is not a step
                self.spans[self._work].append(now - self._t)
            self._t, self._work = now, False
            step()

        def noted_take(decode_tokens):
            got = take(decode_tokens)
            self._work = self._work or bool(got)
            return got

        sched.step, sched.work.take = timed_step, noted_take

    def reset(self) -> None:
        self.spans, self._t = ([], []), None

    def summary(self) -> dict:
        def pct(xs):
            return {"n": len(xs), "p50_ms": round(1e3 * _pct(xs, .5), 2), "p99_ms": round(1e3 * _pct(xs, .99), 2)} \
                if xs else {"n": 0}
        return {"without_work": pct(self.spans[0]), "with_work": pct(self.spans[1])}


def _configure(state, mode: str) -> str:
    """The scheduler's step budget for a run name (``beside@128``: 128 tokens, ``beside@64/2``: 64 tokens and 2
    work forwards a step; else the engine's settings)."""
    base, _, budget = mode.partition("@")
    tokens, _, forwards = budget.partition("/")
    settings, work = state.engine.settings, state.scheduler.work
    work.step_tokens = int(tokens) if tokens else settings.step_tokens
    work.step_forwards = int(forwards) if forwards else settings.step_forwards
    return base


def bench_itl(engine, *, modes=MODES, streams: int = 4, rounds: int = 1, max_tokens: int = 64, decide_clients: int = 1,
              decisions: int = 20, preset: str = "support_triage", progress=None) -> dict:
    import httpx  # optional extra: server

    raw = presets.raw(preset)
    decide_body = {"schema": raw["schema"], "context": raw["examples"][0]}
    app = create_app(engine, ServerConfig(warmup=True, max_batch=streams))
    runs = []
    with live_server(app, timeout=600) as url:
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        httpx.post(url + "/v1/decide", json=decide_body, timeout=600).raise_for_status()  # plan compiled once
        clock = StepClock(app.state.typedlm.scheduler)
        for mode in modes:
            if progress:
                progress(f"{mode} ...")
            base = _configure(app.state.typedlm, mode)
            clock.reset()
            run = _decide_alone(url, decide_body, max(1, decide_clients), decisions) if base == "decide-alone" else \
                _beside(url, model, base, streams=streams, rounds=rounds, max_tokens=max_tokens,
                        decide_clients=decide_clients, decide_body=decide_body)
            runs.append({**run, "mode": mode, "steps": clock.summary()})
            if progress:
                progress(f"{mode}: {json.dumps(runs[-1])}")
    _ratios(runs)
    return {"model": engine.name, "device": str(engine.device), "dtype": str(engine.dtype).replace("torch.", ""),
            "machine": f"{os.cpu_count()}-core {platform.machine()} CPU" if engine.device.type == "cpu"
            else torch.cuda.get_device_name(engine.device),
            "torch_threads": torch.get_num_threads(), "step_tokens": engine.settings.step_tokens,
            "step_forwards": engine.settings.step_forwards,
            "streams": streams, "rounds": rounds, "max_tokens": max_tokens, "decide_clients": decide_clients,
            "preset": preset,
            "targets": TARGETS, "runs": runs}


def _ratios(runs: list[dict]) -> None:
    """Each run's p99 ITL vs ``alone`` and decide p50 vs ``decide-alone``, and whether both meet their targets."""
    base = next((r["itl_ms"]["p99"] for r in runs if r["mode"] == "alone"), None)
    solo = next((r["decide_s"]["p50"] for r in runs if r["mode"] == "decide-alone" and r["decide_s"]), None)
    for r in runs:
        r["p99_vs_alone"] = round(r["itl_ms"]["p99"] / base, 2) if base and r["itl_ms"] else None
        r["decide_p50_vs_alone"] = round(r["decide_s"]["p50"] / solo, 2) if solo and r["decide_s"] else None
        if r["mode"] not in ("alone", "decide-alone"):
            r["meets_targets"] = None if None in (r["p99_vs_alone"], r["decide_p50_vs_alone"]) else \
                (r["p99_vs_alone"] <= TARGETS["p99_vs_alone"] and r["decide_p50_vs_alone"] <= TARGETS["decide_p50_vs_alone"])


COLUMNS = ("run", "ITL p50 ms", "p90 ms", "p99 ms", "max ms", "p99 vs alone", "decisions", "decide p50 s",
           "decide p99 s", "decide p50 vs alone", "targets met")


def _row(r: dict) -> list[str]:
    i, d = r["itl_ms"] or {}, r["decide_s"] or {}
    ratio = (lambda x: "" if x is None else f"{x}x")
    met = {True: "yes", False: "no"}.get(r.get("meets_targets"), "")
    return [r["mode"], *(str(i.get(k, "")) for k in ("p50", "p90", "p99", "max")), ratio(r["p99_vs_alone"]),
            str(r["decisions"]), str(d.get("p50", "")), str(d.get("p99", "")), ratio(r["decide_p50_vs_alone"]), met]


def print_table(res: dict) -> None:
    t = Table(title=f"ITL of {res['streams']} streams, {res['model']} on {res['device']} "
                    f"({res['torch_threads']} torch threads)")
    for col in COLUMNS:
        t.add_column(col)
    for r in res["runs"]:
        t.add_row(*_row(r))
    Console(stderr=True).print(t)


def to_markdown(res: dict) -> str:
    tg = res["targets"]
    lines = [f"# Inter-token latency beside decide traffic ({res['model']}, {res['machine']})", "",
             f"`{res['command']}`", "",
             f"{res['streams']} streams x {res['rounds']} round(s) x {res['max_tokens']} tokens, "
             f"{res['decide_clients']} decide client(s) (preset `{res['preset']}`), torch threads "
             f"{res['torch_threads']}; step budget {res['step_tokens']} tokens, {res.get('step_forwards', 1)} work forward(s) every other step (``beside@N/F``: N, F). Targets: streams' p99 <= {tg['p99_vs_alone']}x alone and "
             f"decide p50 <= {tg['decide_p50_vs_alone']}x alone, in one run. Decisions beside the streams: those that "
             "started and ended while the streams ran.", ""] + _solo_line(res) + [
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_row(r)) + " |" for r in res["runs"]]
    return "\n".join(lines) + "\n"


def _solo_line(res: dict) -> list[str]:
    alone = next((r for r in res["runs"] if r["mode"] == "decide-alone"), None)
    if not alone or not alone["solo"]["decide_s"] or res["decide_clients"] < 2:
        return []
    solo = alone["solo"]["decide_s"]["p50"]
    beside = ", ".join(f"{r['mode']} {round(r['decide_s']['p50'] / solo, 2)}x" for r in res["runs"]
                       if r["decide_s"] and r["mode"] != "decide-alone")
    return [f"One decision at a time with nothing else running (1 client): p50 {solo} s; decide p50 beside the "
            f"streams vs that: {beside}.", ""]


def _check_modes(modes: tuple[str, ...]) -> str | None:
    for m in modes:
        base, at, budget = m.partition("@")
        if base not in MODES or (at and base != "beside"):
            return f"--mode must be one of {', '.join(MODES)} (beside@TOKENS[/FORWARDS] for a step budget), not {m!r}"
        tokens, slash, forwards = budget.partition("/")
        if at and not (tokens.isdigit() and int(tokens) > 0 and (not slash or (forwards.isdigit() and int(forwards) > 0))):
            return f"--mode {m!r}: the step budget after @ must be TOKENS or TOKENS/FORWARDS, whole numbers > 0"
    return None
