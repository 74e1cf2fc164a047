"""``typedlm eval``: evaluate decisions on labelled cases into a run folder (resumable)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Optional

import typer

from .ray import eval_answerer
from .util import backend_option, fail, user_errors

CHUNK = 8  # cases per decide_many call (the shared prompt prefix is prefilled once per call)
BATCH_CHUNK = 32  # with --prior batch: the batch the prior is estimated from (as `typedlm bench trust`)


def eval_cmd(
    data: Optional[str] = typer.Option(None, "--data", help="bbc | tweets | bbc-multi | news-comments | "
                                       "FILE.jsonl (cases)"),
    suite: bool = typer.Option(False, "--suite", help="every bundled dataset: majority, naive_local, parallel "
                               "default and calibrated (rules fitted on the calibration split); table.md in --out"),
    datasets: str = typer.Option("bbc,tweets,bbc-multi,news-comments", "--datasets", help="with --suite"),
    cal_limit: Optional[int] = typer.Option(None, "--cal-limit", help="with --suite: calibration cases per dataset"),
    flip_limit: int = typer.Option(50, "--flip-limit", help="with --suite: test cases also scored permuted"),
    naive_limit: int = typer.Option(100, "--naive-limit", help="with --suite: test cases naive_local answers"),
    track: str = typer.Option("parallel,naive_local", "--track", help="comma list: parallel, naive_local, openai"),
    modes: str = typer.Option("labels,slots", "--modes", help="parallel track scoring modes (comma list)"),
    prior: str = typer.Option("auto", "--prior", help="parallel track prior: auto (none for boolean fields, neutral "
                              "for the others) | none | neutral | batch (each chunk of --chunk cases decided in one "
                              "decide_many call takes its own prior; needs --no-flip)"),
    calibration: Optional[Path] = typer.Option(None, "--calibration",
                                               help="parallel track: apply this bundle (typedlm calibrate)"),
    order: Optional[str] = typer.Option(None, "--order", help="given | averaged (choices scored in two orders)"),
    examples: int = typer.Option(0, "--examples", help="few-shot: add the first K train-split cases (seeded "
                                 "order) to every case's schema as examples (rendered in the shared prefix)"),
    chunk: Optional[int] = typer.Option(None, "--chunk", help="cases per decide_many call (default 8; "
                                        f"{BATCH_CHUNK} with --prior batch)"),
    limit: Optional[int] = typer.Option(None, "--limit", help="first N cases of the split (fixed seeded order)"),
    split: str = typer.Option("test", "--split", help="train | calibration | test | all"),
    out: Path = typer.Option(..., "--out", help="run folder"),
    resume: bool = typer.Option(False, "--resume", help="continue the run in --out (same settings only)"),
    model: str = typer.Option("default", "--model", "-m", help="local model for parallel / naive_local"),
    device: str = typer.Option("auto", "--device"),
    backend: Optional[str] = backend_option(),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible server (openai track)"),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY"),
    openai_model: Optional[str] = typer.Option(None, "--openai-model", help="model name (default: the first listed)"),
    flip: bool = typer.Option(True, "--flip/--no-flip", help="parallel: also score each case with choices permuted"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
    ray: bool = typer.Option(False, "--ray", help="cases over Ray actors (typedlm[ray]; README 'Scale out')"),
    address: Optional[str] = typer.Option(None, "--address", help="with --ray: auto | ray://HOST:PORT"),
    replicas: int = typer.Option(1, "--replicas", help="with --ray: model actors"),
):
    """Evaluate decisions on labelled cases; writes predictions.jsonl, run.json, timing.json into --out."""
    if suite:
        return _suite(out, model=model, device=device, backend=backend, quiet=quiet, cal_limit=cal_limit, order=order,
                      datasets=tuple(filter(None, map(str.strip, datasets.split(",")))), test_limit=limit,
                      flip_limit=flip_limit, naive_limit=naive_limit)
    if data is None:
        fail("give --data (a dataset or a cases file), or --suite")
    from ..decide.options import DecideOptions  # lazy: CLI start-up
    from ..eval.cases import data_sha256, select, with_examples  # lazy: CLI start-up
    from ..eval.datasets import load_cases  # lazy: CLI start-up
    from ..eval.provenance import model_sha256, prompt_hashes, provenance  # lazy: CLI start-up
    from ..eval.runner import Run, RunError, RunLock  # lazy: CLI start-up

    names, mode_list = ([t.strip() for t in v.split(",") if t.strip()] for v in (track, modes))
    chunk = chunk or (BATCH_CHUNK if prior == "batch" else CHUNK)
    _check_flags(names, mode_list, modes, prior=prior, flip=flip, ray=ray, chunk=chunk, base_url=base_url,
                 limit=limit)
    with user_errors():
        opts = DecideOptions.from_flags(prior=prior, calibration=calibration, order=order)
        dataset, all_cases = load_cases(data)
        cases = select(all_cases, split, limit)
        if not cases:
            fail(f"no cases in split {split!r} of {dataset}")
        if examples:
            cases = with_examples(cases, all_cases, examples)
        engine, tracks = _tracks(names, mode_list, cases, opts, model=model, device=device, backend=backend,
                                 quiet=quiet, base_url=base_url, openai_model=openai_model, api_key=api_key)
        manifest = {"dataset": dataset, "data_sha256": data_sha256(cases), "split": split, "limit": limit,
                    "cases": len(cases), "tracks": [t.config() for t in tracks], "flip": flip,
                    "model": engine.name if engine else None,
                    "model_sha256": model_sha256(engine) if engine else None,
                    "prompts": prompt_hashes(tracks, cases[0].schema, engine) if engine else None,
                    "chunk": chunk, "examples": examples}
        run = Run(out, manifest, tracks, provenance=provenance(), answerer=eval_answerer(
            ray, tracks, model=model, device=device, address=address, replicas=replicas))
        out.mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, _interrupt)  # `kill PID` stops as cleanly as Ctrl-C
        try:
            with RunLock(out):
                summary = _execute(run, cases, run.open(resume), quiet)
        except RunError as e:
            fail(str(e))
    _finish(out, summary)


def _finish(out: Path, summary: dict) -> None:
    """The run's summary on stderr and its exit code: 1 every case skipped (the reason first), 3 the circuit
    breaker stopped it, 130 interrupted."""
    if summary["status"] == "failed":
        typer.echo(f"error: {summary['reason']}", err=True)
    _print_summary(out, summary)
    if summary["status"] == "failed":
        raise typer.Exit(1)
    if summary["status"] == "circuit_open":
        typer.echo(f"error: run stopped: {summary['reason']} (resume with --resume)", err=True)
        raise typer.Exit(3)
    if summary["status"] == "interrupted":
        raise typer.Exit(130)


def _suite(out: Path, *, model, device, backend, quiet, **limits) -> None:
    """``--suite``: :func:`typedlm.eval.suite.run_suite` into ``out``, then its table on stdout."""
    from ..engine import load_engine  # lazy: CLI start-up
    from ..eval.provenance import provenance  # lazy: CLI start-up
    from ..decide.options import DecideOptions  # lazy: CLI start-up
    from ..eval.suite import run_suite  # lazy: CLI start-up
    from torch import get_num_threads as torch_threads  # lazy: CLI start-up

    with user_errors():
        limits["order"] = DecideOptions.from_flags(order=limits["order"]).order

    def progress(dataset, what, k):
        typer.echo(f"suite: {dataset} {what} +{k}", err=True)

    with user_errors():
        engine = load_engine(model, device=device, backend=backend, progress=not quiet)
        prov = provenance()
        run_suite(engine, out, progress=None if quiet else progress, command=prov["command"],
                  machine=f"{prov['machine']}, {engine.device}, torch threads {torch_threads()}", **limits)
    typer.echo((out / "table.md").read_text())


def _check_flags(names: list, mode_list: list, modes: str, *, prior: str, flip: bool, ray: bool, chunk: int,
                 base_url, limit) -> None:
    """Exit 2 on a flag combination ``typedlm eval`` cannot run, before any data or model is loaded."""
    from ..decide.plan import SCORING_MODES  # lazy: CLI start-up
    from ..eval.tracks import TRACKS  # lazy: CLI start-up

    bad = [t for t in names if t not in TRACKS]
    if bad or not names:
        fail(f"--track: unknown track(s) {bad or names}; use a comma list of {', '.join(TRACKS)}")
    if "parallel" in names and (not mode_list or any(m not in SCORING_MODES for m in mode_list)):
        fail(f"--modes must be a comma list of {', '.join(SCORING_MODES)}, got {modes!r}")
    if prior == "batch" and flip and "parallel" in names:
        fail("--prior batch needs --no-flip: each permuted schema is its own one-case call, which has no batch")
    if ray and prior == "batch":
        fail("--prior batch is not for --ray: the batch the prior is estimated from would depend on how Ray "
             "spreads the cases (actors answer case by case)")
    if chunk < 1:
        fail(f"--chunk must be at least 1, got {chunk}")
    if "openai" in names and not base_url:
        fail("the openai track needs --base-url URL (an OpenAI-compatible server, e.g. typedlm serve)")
    if limit is not None and limit < 1:
        fail(f"--limit must be at least 1, got {limit}")


def _tracks(names: list, mode_list: list, cases: list, opts, *, model, device, backend, quiet: bool, base_url,
            openai_model, api_key) -> tuple:
    """(engine or None, the tracks to run); a bundle that does not fit, or a dead server, exits 2 now."""
    from ..decide.api import prepare  # lazy: CLI start-up
    from ..decide.options import DecideOptions  # lazy: CLI start-up
    from ..engine import load_engine  # lazy: CLI start-up
    from ..eval.tracks import NaiveTrack, OpenAITrack, ParallelTrack  # lazy: CLI start-up

    engine = None
    tracks: list = []
    if "parallel" in names or "naive_local" in names:
        engine = load_engine(model, device=device, backend=backend, progress=not quiet)
    if "parallel" in names:
        tracks += [ParallelTrack(engine, DecideOptions.make(opts, scoring=m)) for m in mode_list]
        for t in tracks:  # a bundle made for another model / prompt / scoring / prior: exit 2 now
            prepare(cases[0].schema, [c.context for c in cases[:2]], t.options, engine=engine)
    if "naive_local" in names:
        tracks.append(NaiveTrack(engine))
    if "openai" in names:
        tracks.append(OpenAITrack(base_url, model=openai_model, api_key=api_key))
        tracks[-1].model()  # the served model's name goes into the manifest; a dead server: exit 2 now
    return engine, tracks


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _execute(run, cases, done, quiet: bool) -> dict:
    if quiet:
        return run.execute(cases, done)
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,  # lazy: CLI start-up
                               TimeElapsedColumn, TimeRemainingColumn)

    with Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[acc]}"),
                  transient=False) as bar:
        task = bar.add_task("cases", total=len(cases), acc="")

        def on_case(n, total, acc):
            text = "  ".join(f"{k} {c / n_:.2f}" for k, (c, n_) in acc.items() if n_)
            bar.update(task, completed=n, acc=text)
        return run.execute(cases, done, on_case=on_case)


def _print_summary(out: Path, summary: dict) -> None:
    typer.echo(f"{summary['status']}: {summary['cases_finished']}/{summary['cases_total']} cases, "
               f"{len(summary['skipped'])} skipped -> {out}", err=True)
    for s in summary["skipped"][:5]:
        typer.echo(f"  skipped {s['case_id']}: {s['reason']}", err=True)
