"""``typedlm calibrate``: choose each field's decision rule on the calibration split and write the bundle.

Only the cases of the calibration split are passed on (:func:`typedlm.eval.cases.select`); the test split's
contexts and labels are never scored nor read by the fit (``tests/decide/test_rules.py`` poisons them).
Progress per case and per field goes to stderr; the summary gives the scoring and fitting times.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from .util import backend_option, fail, print_json, user_errors


def calibrate(
    data: str = typer.Option(..., "--data", help="bbc | tweets | bbc-multi | news-comments | FILE.jsonl (cases)"),
    out: Path = typer.Option(..., "--out", help="where to write the bundle (JSON)"),
    priors: str = typer.Option("neutral,none", "--priors", help="prior modes each field may be given (comma "
                               "list of neutral, none, batch; batch needs decide_many with >= 2 contexts)"),
    limit: Optional[int] = typer.Option(None, "--limit", help="the first N calibration-split cases (default all)"),
    scores: Optional[Path] = typer.Option(None, "--scores", help="scores.jsonl to reuse / extend (resumable)"),
    kind: str = typer.Option("auto", "--kind", help="scalar calibrator: auto (chosen by cross-validation "
                             "on the calibration split) | temperature | bias | vector | matrix"),
    order: str = typer.Option("given", "--order", help="given | averaged: the decide option `order` the bundle "
                              "is for (averaged: every case scored in two choice orders)"),
    model: str = typer.Option("default", "--model", "-m"),
    device: str = typer.Option("auto", "--device"),
    backend: Optional[str] = backend_option(),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
):
    """Choose each field's decision rule (prior, calibrator, multi set rule) by cross-validation on the
    calibration split only, and write the bundle; the test split is never read (evaluate with `typedlm eval`)."""
    from ..decide.calibrate import collect as fitting  # lazy: CLI start-up
    from ..decide.calibrate.bundle import SCALAR_KINDS  # lazy: CLI start-up
    from ..decide.prior import PRIOR_MODES  # lazy: CLI start-up
    from ..engine import load_engine  # lazy: CLI start-up
    from ..eval.cases import select  # lazy: CLI start-up
    from ..eval.datasets import load_cases  # lazy: CLI start-up

    quiet = quiet or as_json
    modes = tuple(p.strip() for p in priors.split(",") if p.strip())
    if not modes or any(p not in PRIOR_MODES for p in modes):
        fail(f"--priors must be a comma list of {', '.join(PRIOR_MODES)}, got {priors!r}")
    if kind != "auto" and kind not in SCALAR_KINDS:
        fail(f"--kind must be auto or one of {', '.join(SCALAR_KINDS)}, got {kind!r}")
    if order not in ("given", "averaged"):
        fail(f"--order must be given or averaged, got {order!r}")
    if limit is not None and limit < 2:
        fail("--limit must be at least 2")
    with user_errors():
        name, cases = load_cases(data)
        fit_cases = select(cases, "calibration", limit)
        if len(fit_cases) < 2:
            fail(f"{name} needs at least 2 cases in the calibration split (has {len(fit_cases)})")
        engine = load_engine(model, device=device, backend=backend, progress=not quiet)
        n_fields = len(fit_cases[0].schema.get("fields", {}))
        views = 2 if order == "averaged" else 1  # cases are scored once per view
        with _progress(quiet, views * len(fit_cases), n_fields) as (on_case, on_field):
            bundle, report = fitting.calibrate(engine, fit_cases, data=name, scores=scores, priors=modes,
                                               kinds=SCALAR_KINDS if kind == "auto" else (kind,),
                                               on_case=on_case, on_field=on_field, order=order)
    out.write_text(bundle.model_dump_json(indent=2) + "\n")
    if as_json:
        print_json({"bundle": bundle.model_dump(), "id": bundle.id, "report": report})
        return
    _print_report(name, bundle, report, len(fit_cases), fitting.FOLDS)
    typer.echo(f"wrote {out} ({bundle.id})", err=True)


@contextlib.contextmanager
def _progress(quiet: bool, n_cases: int, n_fields: int):
    """(on_case, on_field) callbacks driving two rich bars on stderr (scoring cases, choosing field rules)."""
    if quiet:
        yield None, None
        return
    from rich.console import Console  # lazy: CLI start-up
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,  # lazy: CLI start-up
                               TimeElapsedColumn, TimeRemainingColumn)

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[note]}"), console=Console(stderr=True)) as bar:
        cases = bar.add_task("calibrate: score", total=n_cases, note="")
        fields = bar.add_task("calibrate: fit rules", total=n_fields, note="")
        yield (lambda k: bar.advance(cases, k)), (lambda name: bar.update(fields, advance=1, note=name))


def _print_report(name: str, bundle, report: dict, n_fit: int, folds: int) -> None:
    sec = report["seconds"]
    typer.echo(f"{name}: rules chosen by {folds}-fold cross-validation on {n_fit} calibration "
               f"cases (test split not read); scoring {sec['scoring']:.1f} s, fitting {sec['fitting']:.1f} s, "
               f"total {sec['total']:.1f} s")
    for f, fc in bundle.fields.items():
        r = report["rules"][f]
        how = f"{fc.kind}" + (f" T={fc.temperature:.3f}" if fc.temperature is not None else "") + \
            (f", set rule {fc.set_rule}, t={fc.threshold:.2f}" if fc.set_rule else "")
        typer.echo(f"  {f}: prior {fc.prior}, {how}; CV accuracy {r['cv_acc']:.3f}, CV ECE {r['cv_ece']:.4f} "
                   f"(n {r['n']})")
