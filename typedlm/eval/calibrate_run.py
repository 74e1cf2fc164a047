"""``typedlm calibrate``'s run: the calibration split of a dataset, progress per case and per field, the summary.

Only the cases of the calibration split are passed on (:func:`typedlm.eval.cases.select`); the test split's
contexts and labels are never scored nor read by the fit (``tests/test_decide_rules.py`` poisons them).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from ..cliutil import fail, print_json, user_errors


@contextlib.contextmanager
def _progress(quiet: bool, n_cases: int, n_fields: int):
    """(on_case, on_field) callbacks driving two rich bars on stderr (scoring cases, choosing field rules)."""
    if quiet:
        yield None, None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[note]}"), console=Console(stderr=True)) as bar:
        cases = bar.add_task("calibrate: score", total=n_cases, note="")
        fields = bar.add_task("calibrate: fit rules", total=n_fields, note="")
        yield (lambda k: bar.advance(cases, k)), (lambda name: bar.update(fields, advance=1, note=name))


def run_calibrate(*, data: str, out: Path, priors: str, limit: int | None, scores: Path | None, kind: str, model: str,
                  device: str, backend: str | None, as_json: bool, quiet: bool) -> None:
    from ..decide import fitting
    from ..decide.calibration import SCALAR_KINDS
    from ..decide.prior import PRIOR_MODES
    from ..engine import load_engine
    from .cases import select
    from .cli import load_cases

    modes = tuple(p.strip() for p in priors.split(",") if p.strip())
    if not modes or any(p not in PRIOR_MODES for p in modes):
        fail(f"--priors must be a comma list of {', '.join(PRIOR_MODES)}, got {priors!r}")
    if kind != "auto" and kind not in SCALAR_KINDS:
        fail(f"--kind must be auto or one of {', '.join(SCALAR_KINDS)}, got {kind!r}")
    if limit is not None and limit < 2:
        fail("--limit must be at least 2")
    with user_errors():
        name, cases = load_cases(data)
        fit_cases = select(cases, "calibration", limit)
        if len(fit_cases) < 2:
            fail(f"{name} needs at least 2 cases in the calibration split (has {len(fit_cases)})")
        engine = load_engine(model, device=device, backend=backend, progress=not quiet)
        n_fields = len(fit_cases[0].schema.get("fields", {}))
        with _progress(quiet, len(fit_cases), n_fields) as (on_case, on_field):
            bundle, report = fitting.calibrate(engine, fit_cases, data=name, scores=scores, priors=modes,
                                               kinds=SCALAR_KINDS if kind == "auto" else (kind,),
                                               on_case=on_case, on_field=on_field)
    out.write_text(bundle.model_dump_json(indent=2) + "\n")
    if as_json:
        print_json({"bundle": bundle.model_dump(), "id": bundle.id, "report": report})
        return
    sec = report["seconds"]
    typer.echo(f"{name}: rules chosen by {fitting.FOLDS}-fold cross-validation on {len(fit_cases)} calibration "
               f"cases (test split not read); scoring {sec['scoring']:.1f} s, fitting {sec['fitting']:.1f} s, "
               f"total {sec['total']:.1f} s")
    for f, fc in bundle.fields.items():
        r = report["rules"][f]
        how = f"{fc.kind}" + (f" T={fc.temperature:.3f}" if fc.temperature is not None else "") + \
            (f", set rule {fc.set_rule}, t={fc.threshold:.2f}" if fc.set_rule else "")
        typer.echo(f"  {f}: prior {fc.prior}, {how}; CV accuracy {r['cv_acc']:.3f}, CV ECE {r['cv_ece']:.4f} "
                   f"(n {r['n']})")
    typer.echo(f"wrote {out} ({bundle.id})", err=True)
