"""``typedlm bench soak``: concurrent mixed traffic against a real server on loopback (:mod:`typedlm.bench.soak`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..util import backend_option, fail, print_json, user_errors, write_json


def soak(
    model: str = typer.Option("tiny", "--model", "-m", help="tiny (random-weight test model) | default | HF dir"),
    arch: Optional[str] = typer.Option(None, "--arch", help="random-weight real architecture, e.g. qwen2.5-7b"),
    device: str = typer.Option("cpu", "--device"),
    backend: Optional[str] = backend_option(),
    clients: int = typer.Option(32, "--clients"),
    duration: float = typer.Option(600, "--duration", help="seconds of traffic"),
    max_tokens: int = typer.Option(32, "--max-tokens"),
    max_batch: int = typer.Option(16, "--max-batch"),
    interval: float = typer.Option(5.0, "--interval", help="seconds between /metrics samples"),
    out: Optional[Path] = typer.Option(None, "--json", help="write the results JSON here"),
):
    """Concurrent mixed traffic (chat, JSON, tools, decide, decide_many, disconnects, cancels, bad requests)."""
    from ...bench.soak import bench_soak  # lazy: CLI start-up

    if min(clients, max_batch) < 1 or duration <= 0 or max_tokens < 1:
        fail("--clients, --max-batch, --max-tokens >= 1; --duration > 0")
    with user_errors():
        if model == "tiny" and not arch:
            from ...testing import tiny_engine  # lazy: CLI start-up

            engine = tiny_engine()
        else:
            from ...testing.archs import bench_engine  # lazy: CLI start-up

            engine = bench_engine(arch, model, device=device, backend=backend)
        res = bench_soak(engine, clients=clients, duration=duration, max_tokens=max_tokens, max_batch=max_batch,
                         interval=interval, progress=lambda m: typer.echo(f"... {m}", err=True))
    print_json({k: v for k, v in res.items() if k != "series"})
    if out:
        write_json(out, res)
