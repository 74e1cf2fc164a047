"""``typedlm bench soak``: many concurrent clients against a real server on loopback, for a fixed time.

Each client loops over request kinds in turn (its own offset, so every kind runs at every moment):
``chat`` (streamed free text), ``json`` (JSON Schema), ``tools`` (a required tool call), ``decide``
(``/v1/decide``, one context), ``decide_many`` (four contexts), ``disconnect`` (a stream the client drops after
two chunks), ``cancel`` (a request whose client gives up after 50 ms) and ``malformed`` (a bad body: a 4xx is
the right answer). A sampler reads ``/metrics`` (slots held, batch, queue, prefix-cache blocks) and the process's
resident memory every ``interval`` seconds. Reported: responses by kind and status, p50 / p99 latency per kind,
the series, resident memory growth after warm-up (the first fifth of the run), and whether slots went back to
zero once the clients stopped.
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time

from ..decide import presets
from ..server.app import create_app
from ..server.state import ServerConfig
from ..server.testing import live_server
from .grammar import _pct

KINDS = ("chat", "json", "tools", "decide", "decide_many", "disconnect", "cancel", "malformed")
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look up an order",
                                         "parameters": {"type": "object", "properties": {"id": {"type": "integer"}},
                                                        "required": ["id"]}}}
GAUGES = ("typedlm_kv_slots_in_use", "typedlm_batch_size", "typedlm_queue_depth", "typedlm_prefix_cache_blocks")


def _rss_mb() -> float:
    """Resident memory of this process (the server runs in it), from /proc; 0 where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration):
        return 0.0


def _request(client, url: str, model: str, kind: str, n: int, decide_body: dict, max_tokens: int) -> int:
    """One request of ``kind`` -> its HTTP status (0: the client dropped or gave up on purpose)."""
    import httpx  # optional extra: server (the client side of the soak)

    msg = [{"role": "user", "content": f"Request {n}: tell me about the number {n}."}]
    chat = {"model": model, "messages": msg, "max_tokens": max_tokens, "temperature": 1.0, "seed": n}
    if kind in ("chat", "disconnect"):
        with client.stream("POST", url + "/v1/chat/completions", json={**chat, "stream": True}) as r:
            chunks = 0
            for line in r.iter_lines():
                chunks += line.startswith("data: {")
                if kind == "disconnect" and chunks >= 2:
                    return 0  # leaving the block closes the connection mid-stream
            return r.status_code
    if kind == "json":
        body = {**chat, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}}
        return client.post(url + "/v1/chat/completions", json=body).status_code
    if kind == "tools":
        return client.post(url + "/v1/chat/completions", json={**chat, "tools": [TOOL],
                                                                "tool_choice": "required"}).status_code
    if kind == "decide":
        return client.post(url + "/v1/decide", json=decide_body).status_code
    if kind == "decide_many":
        body = {"schema": decide_body["schema"], "contexts": [f"{decide_body['context']} ({i})" for i in range(4)]}
        return client.post(url + "/v1/decide", json=body).status_code
    if kind == "cancel":
        try:
            return client.post(url + "/v1/chat/completions", json=chat, timeout=0.05).status_code
        except httpx.TimeoutException:
            return 0
    bad = [b"{not json", json.dumps({"model": model, "messages": "hi"}).encode(),
           json.dumps({**chat, "response_format": {"type": "json_schema",
                                                   "json_schema": {"name": "x", "schema": {"type": 7}}}}).encode()]
    return client.post(url + "/v1/chat/completions", content=bad[n % 3],
                       headers={"content-type": "application/json"}).status_code


def _client(i: int, url: str, model: str, stop: threading.Event, log: list, decide_body: dict, max_tokens: int):
    import httpx  # optional extra: server (the client side of the soak)

    n = i
    with httpx.Client(timeout=600) as client:
        while not stop.is_set():
            kind = KINDS[n % len(KINDS)]
            t0 = time.perf_counter()
            try:
                status = _request(client, url, model, kind, n, decide_body, max_tokens)
            except httpx.HTTPError as e:
                status = f"client error: {type(e).__name__}"
            log.append((kind, status, time.perf_counter() - t0, t0))
            n += len(KINDS) + 1  # the next kind, another seed


def _scrape(url: str) -> dict:
    import httpx  # optional extra: server (the client side of the soak)

    text = httpx.get(url + "/metrics", timeout=30).text
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in GAUGES:
            out[name] = float(value)
    return out


def _sampler(url: str, stop: threading.Event, series: list, interval: float, t0: float):
    while not stop.wait(interval):
        series.append({"t": round(time.perf_counter() - t0, 1), "rss_mb": round(_rss_mb(), 1), **_scrape(url)})


def bench_soak(engine, *, clients: int = 32, duration: float = 600, max_tokens: int = 32, max_batch: int = 16,
               interval: float = 5.0, preset: str = "support_triage", progress=None) -> dict:
    import httpx  # optional extra: server (the client side of the soak)

    raw = presets.raw(preset)
    decide_body = {"schema": raw["schema"], "context": raw["examples"][0]}
    app = create_app(engine, ServerConfig(warmup=True, max_batch=max_batch, max_queue=4 * clients))
    log: list = []
    series: list = []
    with live_server(app, timeout=600) as url:
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        stop, t0 = threading.Event(), time.perf_counter()
        threads = [threading.Thread(target=_client, args=(i, url, model, stop, log, decide_body, max_tokens))
                   for i in range(clients)]
        threads.append(threading.Thread(target=_sampler, args=(url, stop, series, interval, t0)))
        for t in threads:
            t.start()
        while time.perf_counter() - t0 < duration:
            time.sleep(min(10.0, duration))
            if progress:
                progress(f"{time.perf_counter() - t0:.0f} s: {len(log)} responses; {series[-1] if series else ''}")
        stop.set()
        for t in threads:
            t.join()
        idle = _idle(url)
    return {"model": engine.name, "device": str(engine.device), "clients": clients, "duration_s": duration,
            "max_tokens": max_tokens, "max_batch": max_batch,
            "machine": f"{os.cpu_count()}-core {platform.machine()}", **summarize(log, series), "idle_after": idle}


def _idle(url: str, wait: float = 60.0) -> dict:
    """The gauges once the clients stopped: polled until no slot is held (or ``wait`` seconds passed)."""
    t0 = time.perf_counter()
    got = _scrape(url)
    while got.get("typedlm_kv_slots_in_use", 0) and time.perf_counter() - t0 < wait:
        time.sleep(0.5)
        got = _scrape(url)
    return {**got, "rss_mb": round(_rss_mb(), 1), "waited_s": round(time.perf_counter() - t0, 1)}


def summarize(log: list, series: list) -> dict:
    """Responses by kind and status, latency per kind, 5xx count, resident memory growth after warm-up."""
    by: dict = {}
    for kind, status, dt, _ in log:
        k = by.setdefault(kind, {"statuses": {}, "lat": []})
        k["statuses"][str(status)] = k["statuses"].get(str(status), 0) + 1
        k["lat"].append(dt)
    kinds = {kind: {"responses": len(v["lat"]), "statuses": v["statuses"],
                    "latency_s": {"p50": round(_pct(v["lat"], .5), 4), "p99": round(_pct(v["lat"], .99), 4)}}
             for kind, v in sorted(by.items())}
    five = sum(n for v in by.values() for s, n in v["statuses"].items() if s.startswith("5"))
    warm = [s["rss_mb"] for s in series[len(series) // 5:]] if series else []
    growth = round(100 * (warm[-1] - warm[0]) / warm[0], 2) if len(warm) > 1 and warm[0] else None
    return {"responses": len(log), "status_5xx": five, "kinds": kinds, "rss_growth_after_warmup_pct": growth,
            "peak": {g: max((s.get(g, 0) for s in series), default=0) for g in GAUGES}, "series": series}
