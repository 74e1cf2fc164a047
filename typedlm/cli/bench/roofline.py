"""``typedlm bench roofline``: the decision pass, a prefill and a decode step as fractions of the device's peaks."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from ..util import fail, print_json, user_errors, write_json


def roofline(
    arch: str = typer.Option("qwen2.5-7b", "--arch", help="qwen2.5-7b | qwen2.5-0.5b | tiny"),
    device: str = typer.Option("auto", "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="default: bf16 on cuda, fp32 on cpu"),
    tokens: int = typer.Option(512, "--tokens", help="prompt tokens of the prefill (and before each decode row)"),
    batch: Optional[list[int]] = typer.Option(None, "--batch", help="decode batch sizes (repeatable; default 1, 32)"),
    many: int = typer.Option(16, "--many", help="contexts of the decide_many case"),
    runs: int = typer.Option(5, "--runs", help="timed calls per case (median)"),
    preset: str = typer.Option("support_triage", "--preset"),
    decisions: bool = typer.Option(True, "--decisions/--no-decisions", help="the decision cases too"),
    machine: Optional[str] = typer.Option(None, "--machine", help="machine description for the report"),
    out: Optional[Path] = typer.Option(None, "--json", help="write the results JSON here"),
):
    """Achieved TFLOPS and GB/s of decide, decide_many, a prefill and a decode step as fractions of the device's
    peaks, the host time the device waits on, and the warm-up (static KV + CUDA graph capture) time."""
    from ...bench.decide import _machine  # lazy: CLI start-up
    from ...bench.gen import load_subject  # lazy: CLI start-up
    from ...bench.roofline import bench_roofline, print_table  # lazy: CLI start-up

    batches = tuple(batch or (1, 32))
    if min(batches) < 1 or min(tokens, many, runs) < 1:
        fail("--batch, --tokens, --many and --runs must be >= 1")
    with user_errors():
        engine = load_subject(arch, device, dtype)
        res = bench_roofline(engine, tokens=tokens, runs=runs, many=many, batches=batches, preset=preset,
                             decisions=decisions,
                             progress=lambda m: typer.echo(f"... {m}", err=True))
    res["machine"] = machine or _machine(engine)
    res["command"] = ("typedlm bench roofline " + shlex.join(sys.argv[sys.argv.index("roofline") + 1:]
                                                             if "roofline" in sys.argv else [])).strip()
    print_json(res)
    print_table(res)
    if out:
        write_json(out, res)
