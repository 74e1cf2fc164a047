"""``typedlm calibrate``: fit a calibration bundle on labelled cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from .util import backend_option, fail, print_json, user_errors


def calibrate(
    data: str = typer.Option(..., "--data", help="bbc | tweets | bbc-multi | FILE.jsonl (eval cases)"),
    out: Path = typer.Option(..., "--out", help="where to write the bundle (JSON)"),
    prior: Optional[str] = typer.Option(None, "--prior",
                                        help="neutral (default) | none | batch: the prior mode it is fitted for"),
    limit: int = typer.Option(200, "--limit", help="cases of the calibration split to fit on"),
    test_limit: int = typer.Option(200, "--test-limit", help="cases of the test split for the held-out ECE"),
    scores: Optional[Path] = typer.Option(None, "--scores", help="scores.jsonl to reuse / extend (resumable)"),
    kind: str = typer.Option("auto", "--kind", help="scalar calibrator: auto (chosen by cross-validated NLL "
                             "on the calibration split) | temperature | bias | vector | matrix"),
    model: str = typer.Option("default", "--model", "-m"),
    device: str = typer.Option("auto", "--device"),
    backend: Optional[str] = backend_option(),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
):
    """Fit a calibration bundle on the calibration split; held-out ECE before/after on the test split.
    Refuses (exit 1) to write a bundle whose held-out ECE got worse."""
    from ..decide.calibrate import collect as fitting  # lazy: CLI start-up
    from ..decide.api import plan_for  # lazy: CLI start-up
    from ..decide.calibrate.bundle import SCALAR_KINDS  # lazy: CLI start-up
    from ..decide.prior import DEFAULT_PRIOR, check_mode  # lazy: CLI start-up
    from ..engine import load_engine  # lazy: CLI start-up
    from ..eval.cases import select  # lazy: CLI start-up
    from ..eval.datasets import load_cases  # lazy: CLI start-up

    prior = prior or DEFAULT_PRIOR
    if kind != "auto" and kind not in SCALAR_KINDS:
        fail(f"--kind must be auto or one of {', '.join(SCALAR_KINDS)}, got {kind!r}")
    with user_errors():
        check_mode(prior)
        if limit < 2 or test_limit < 2:
            fail("--limit and --test-limit must be at least 2")
        name, cases = load_cases(data)
        fit_cases, test_cases = select(cases, "calibration", limit), select(cases, "test", test_limit)
        if not fit_cases or not test_cases:
            fail(f"{name} needs cases in both the calibration and the test split")
        schemas = {json.dumps(c.schema, sort_keys=True) for c in fit_cases + test_cases}
        if len(schemas) != 1:
            fail(f"{name}: calibration needs one schema for every case, found {len(schemas)}")
        engine = load_engine(model, device=device, backend=backend, progress=not as_json)
        plan = plan_for(fit_cases[0].schema, engine)
        scored = fitting.collect(engine, plan.schema, fit_cases + test_cases, scores)
        fit_s, test_s = scored[:len(fit_cases)], scored[len(fit_cases):]
        neutral = fitting.neutral_logs(engine, plan) if prior == "neutral" else None
        bundle, report = fitting.fit_bundle(engine, plan, fit_s, test_s, prior, neutral, data=name,
                                            kinds=SCALAR_KINDS if kind == "auto" else (kind,))
    before, after = report["before"]["ece"], report["after"]["ece"]
    if as_json:
        print_json({"bundle": bundle.model_dump(), "id": bundle.id, "report": report})
    else:
        _print_report(name, bundle, report, len(fit_s), len(test_s))
    if not after <= before:
        typer.echo(f"error: held-out ECE got worse ({before:.4f} -> {after:.4f}): bundle not written", err=True)
        raise typer.Exit(1)
    out.write_text(bundle.model_dump_json(indent=2) + "\n")
    typer.echo(f"wrote {out} ({bundle.id})", err=True)


def _print_report(name: str, bundle, report: dict, n_fit: int, n_test: int) -> None:
    before, after = report["before"]["ece"], report["after"]["ece"]
    typer.echo(f"{name}: fitted on {n_fit} calibration cases; held-out ECE on {n_test} test "
               f"cases {before:.4f} -> {after:.4f}")
    for f, fc in bundle.fields.items():
        par = f" T={fc.temperature:.3f}" if fc.temperature is not None else \
            f" a={fc.a:.3f} b={fc.b:.3f}" if fc.kind == "logistic" else ""
        rb, ra = report["before"]["fields"][f], report["after"]["fields"][f]
        nll = f"; NLL {rb['nll']:.4f} -> {ra['nll']:.4f}" if "nll" in rb else ""
        typer.echo(f"  {f}: {fc.kind}{par}; ECE {rb['ece']:.4f} -> {ra['ece']:.4f}{nll}")
