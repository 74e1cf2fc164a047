"""``typedlm bench itl``: inter-token latency of streaming requests, alone and beside decide traffic.

A real server on loopback (the app ``typedlm serve`` runs) serves ``--streams`` streaming chat requests at
once; every SSE content chunk's arrival time is recorded per stream and the gaps between consecutive
chunks are the inter-token latencies (the first chunk, TTFT, is not one). Runs on the same engine:

- ``alone``        the streams only
- ``interleaved``  the streams while ``--decide-clients`` clients post ``/v1/decide`` back to back
                   (decide forwards interleave with decode steps: :mod:`typedlm.server.interleave`)
- ``parallel``     the same traffic with decide forwards on their own thread beside the decode steps
                   (CPU, with a core left free by ``--threads``)
- ``exclusive``    the same traffic with each decision run as one block between two steps (the old path)

Reported: p50 / p90 / p99 / max ITL per run, decisions completed and their p50 latency, and p99 ITL
relative to ``alone``. ``--threads`` sets torch's intra-op threads (on a CPU shared with other work, one
thread avoids OpenMP barrier stalls that dwarf the model's own cost).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import threading
import time
from pathlib import Path
from typing import Optional

import typer

from ..cliutil import backend_option

from .grammar import _pct

MODES = ("alone", "interleaved", "parallel", "exclusive")


def _stream(url: str, body: dict, arrivals: list[float]) -> None:
    import httpx

    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {") and any(c.get("delta", {}).get("content")
                                                  for c in json.loads(line[6:])["choices"]):
                arrivals.append(time.perf_counter())


def _decider(url: str, body: dict, stop: threading.Event, latencies: list[float]) -> None:
    import httpx

    while not stop.is_set():
        t0 = time.perf_counter()
        r = httpx.post(url + "/v1/decide", json=body, timeout=600)
        r.raise_for_status()
        latencies.append(time.perf_counter() - t0)


def run_mode(engine, mode: str, *, streams: int, max_tokens: int, decide_clients: int, preset: str,
             chunk_tokens: int, chunk_rows: int) -> dict:
    from ..decide import presets
    from ..server.app import create_app
    from ..server.state import ServerConfig
    from ..server.testing import live_server

    raw = presets.raw(preset)
    config = ServerConfig(warmup=True, max_batch=streams, decide_mode="interleaved" if mode == "alone" else mode,
                          decide_chunk_tokens=chunk_tokens, decide_chunk_rows=chunk_rows)
    decide_body = {"schema": raw["schema"], "context": raw["examples"][0]}
    with live_server(create_app(engine, config), timeout=600) as url:
        import httpx

        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        httpx.post(url + "/v1/decide", json=decide_body, timeout=600).raise_for_status()  # plan compiled once
        bodies = [{"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 1.0, "seed": i,
                   "messages": [{"role": "user", "content": f"Tell me a long story about the number {i}."}]}
                  for i in range(streams)]
        arrivals = [[] for _ in bodies]
        stop, latencies = threading.Event(), []
        deciders = [threading.Thread(target=_decider, args=(url, decide_body, stop, latencies))
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
        wall = time.perf_counter() - t0
        stop.set()
        for t in deciders:
            t.join()
    itl = [b - a for arr in arrivals for a, b in zip(arr, arr[1:])]
    return {"mode": mode, "chunks": sum(len(a) for a in arrivals), "itl_count": len(itl),
            "itl_ms": {k: round(1e3 * _pct(itl, q), 2) for k, q in (("p50", .5), ("p90", .9), ("p99", .99), ("max", 1))},
            "decisions": len(latencies),
            "decide_p50_s": round(statistics.median(latencies), 3) if latencies else None,
            "wall_s": round(wall, 2)}


def bench_itl(engine, *, modes=MODES, streams: int = 4, max_tokens: int = 64, decide_clients: int = 1,
              preset: str = "support_triage", chunk_tokens: int = 256, chunk_rows: int = 1, progress=None) -> dict:
    import torch

    from ..server.interleave import resolve_decide_mode

    runs = []
    for mode in modes:
        if progress:
            progress(f"{mode} ...")
        runs.append(run_mode(engine, mode, streams=streams, max_tokens=max_tokens, decide_clients=decide_clients,
                             preset=preset, chunk_tokens=chunk_tokens, chunk_rows=chunk_rows))
    base = next((r["itl_ms"]["p99"] for r in runs if r["mode"] == "alone"), None)
    for r in runs:
        r["p99_vs_alone"] = round(r["itl_ms"]["p99"] / base, 2) if base else None
    return {"model": engine.name, "device": str(engine.device), "dtype": str(engine.dtype).replace("torch.", ""),
            "machine": f"{os.cpu_count()}-core {platform.machine()} CPU" if engine.device.type == "cpu"
            else torch.cuda.get_device_name(engine.device),
            "torch_threads": torch.get_num_threads(), "auto_decide_mode": resolve_decide_mode("auto", engine), "streams": streams, "max_tokens": max_tokens,
            "decide_clients": decide_clients, "preset": preset, "decide_chunk_tokens": chunk_tokens,
            "decide_chunk_rows": chunk_rows, "runs": runs}


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"ITL of {res['streams']} streams, {res['model']} on {res['device']} "
                    f"({res['torch_threads']} torch threads)")
    for col in ("run", "p50 ms", "p90 ms", "p99 ms", "max ms", "p99 vs alone", "decisions", "decide p50 s"):
        t.add_column(col)
    for r in res["runs"]:
        i = r["itl_ms"]
        t.add_row(r["mode"], f"{i['p50']:.1f}", f"{i['p90']:.1f}", f"{i['p99']:.1f}", f"{i['max']:.1f}",
                  f"{r['p99_vs_alone']:.2f}x" if r["p99_vs_alone"] else "", str(r["decisions"]),
                  "" if r["decide_p50_s"] is None else f"{r['decide_p50_s']:.3f}")
    Console(stderr=True).print(t)


def to_markdown(res: dict) -> str:
    lines = [f"# Inter-token latency beside decide traffic ({res['model']}, {res['machine']})", "",
             f"`{res['command']}`", "",
             f"{res['streams']} streams x {res['max_tokens']} tokens, {res['decide_clients']} decide client(s) "
             f"(preset `{res['preset']}`), torch threads {res['torch_threads']}, decide chunks: at most "
             f"{res['decide_chunk_tokens']} prefill tokens, {res['decide_chunk_rows']} rows per pass.", "",
             "| run | p50 ms | p90 ms | p99 ms | max ms | p99 vs alone | decisions | decide p50 s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        i = r["itl_ms"]
        lines.append(f"| {r['mode']} | {i['p50']} | {i['p90']} | {i['p99']} | {i['max']} | {r['p99_vs_alone']} | "
                     f"{r['decisions']} | {r['decide_p50_s'] if r['decide_p50_s'] is not None else ''} |")
    return "\n".join(lines) + "\n"


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @bench_app.command("itl")
    def itl(
        model: str = typer.Option("tiny", "--model", "-m", help="tiny (random-weight test model) | default | HF dir"),
        device: str = typer.Option("cpu", "--device"),
        backend: Optional[str] = backend_option(),
        streams: int = typer.Option(4, "--streams"),
        max_tokens: int = typer.Option(64, "--max-tokens"),
        decide_clients: int = typer.Option(1, "--decide-clients"),
        preset: str = typer.Option("support_triage", "--preset"),
        chunk_tokens: int = typer.Option(256, "--chunk-tokens", help="at most this many decide prefill tokens per forward"),
        chunk_rows: int = typer.Option(1, "--chunk-rows", help="decision rows per scoring pass"),
        threads: Optional[int] = typer.Option(None, "--threads", help="torch intra-op threads"),
        mode: Optional[list[str]] = typer.Option(None, "--mode", help="alone | interleaved | parallel | exclusive (repeatable)"),
        out: Optional[Path] = typer.Option(None, "--json", help="write the results JSON here"),
    ):
        """p50/p99 inter-token latency of streaming requests alone and beside /v1/decide traffic."""
        import shlex
        import sys

        from ..cliutil import fail, print_json, user_errors

        modes = tuple(mode or MODES)
        if any(m not in MODES for m in modes):
            fail(f"--mode must be one of {', '.join(MODES)}")
        if streams < 1 or max_tokens < 2 or decide_clients < 0 or chunk_tokens < 1 or chunk_rows < 1:
            fail("--streams, --chunk-tokens, --chunk-rows >= 1; --max-tokens >= 2; --decide-clients >= 0")
        import torch

        if threads:
            torch.set_num_threads(threads)
        with user_errors():
            if model == "tiny":
                from ..testing import tiny_engine

                engine = tiny_engine()
            else:
                from ..engine import load_engine

                engine = load_engine(model, device=device, backend=backend, progress=False)
            res = bench_itl(engine, modes=modes, streams=streams, max_tokens=max_tokens, decide_clients=decide_clients,
                            preset=preset, chunk_tokens=chunk_tokens, chunk_rows=chunk_rows,
                            progress=lambda m: typer.echo(f"... {m}", err=True))
        res["command"] = "typedlm bench itl " + shlex.join(sys.argv[sys.argv.index("itl") + 1:]
                                                           if "itl" in sys.argv else [])
        print_json(res)
        print_table(res)
        if out:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
            Path(out).with_suffix(".md").write_text(to_markdown(res), encoding="utf-8")
