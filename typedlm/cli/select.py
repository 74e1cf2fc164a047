"""``typedlm select``: choose prior / calibration / few-shot examples on validation cases."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .util import backend_option, fail, user_errors


def select_cmd(
    data: str = typer.Option(..., "--data", help="bbc | tweets | bbc-multi | news-comments | FILE.jsonl"),
    out: Path = typer.Option(..., "--out", help="folder: scores, selection.json, an eval run folder"),
    fit_limit: int = typer.Option(100, "--fit-limit", help="validation: the first N calibration-split cases"),
    test_limit: int = typer.Option(200, "--test-limit", help="the first N test-split cases"),
    examples: str = typer.Option("0,2,4", "--examples", help="few-shot counts K to try (comma list, with 0)"),
    naive: Optional[Path] = typer.Option(None, "--naive", help="an eval run folder with naive_local lines on "
                                         "the test split: copied in for the paired comparison"),
    model: str = typer.Option("default", "--model", "-m"),
    device: str = typer.Option("auto", "--device"),
    backend: Optional[str] = backend_option(),
):
    """Choose prior / calibration / few-shot examples on validation cases (calibration split; +cal variants
    cross-validated), then report the choice and the default on the test split."""
    from ..engine import load_engine  # lazy: CLI start-up
    from ..eval.datasets import load_cases  # lazy: CLI start-up
    from ..eval.select import run_select  # lazy: CLI start-up

    try:
        ks = sorted({int(k) for k in examples.split(",") if k.strip()})
    except ValueError:
        fail(f"--examples must be a comma list of integers, got {examples!r}")
    with user_errors():
        dataset, all_cases = load_cases(data)
        engine = load_engine(model, device=device, backend=backend, progress=False)
        s = run_select(engine, dataset, all_cases, out, fit_n=fit_limit, test_n=test_limit, ks=ks, naive=naive)
    for r in s["validation"]:
        typer.echo(f"{r['variant']:>16}  validation {r['score']:.3f}  "
                   + "  ".join(f"{k} {v:.3f}" for k, v in r["fields"].items()))
    for mode, t in s["test"].items():
        typer.echo(f"test {mode} ({t['variant']}): " + "  ".join(f"{k} {v:.3f}" for k, v in t["fields"].items()))
