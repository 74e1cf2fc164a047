"""``typedlm report``: report.md, report.json and PNG plots for eval runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .util import fail, user_errors


def report_cmd(
    runs: list[Path] = typer.Argument(..., help="run folders (several: side by side)"),
    out: Optional[Path] = typer.Option(None, "--out", help="report folder (default: the run folder when one run)"),
    bootstrap: int = typer.Option(1000, "--bootstrap", help="bootstrap resamples for the 95 % intervals"),
    seed: int = typer.Option(0, "--seed"),
):
    """report.md + report.json + PNG plots (reliability, accuracy vs latency, confusion) for runs."""
    from ..eval.report import write_report  # lazy: CLI start-up

    if out is None:
        if len(runs) != 1:
            fail("several runs: give --out DIR for the combined report")
        out = runs[0]
    with user_errors():
        paths = write_report(list(runs), Path(out), n_boot=bootstrap, seed=seed)
    for p in paths:
        typer.echo(str(p))
