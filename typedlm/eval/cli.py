"""``typedlm eval`` and ``typedlm report``."""

from __future__ import annotations

import hashlib
import platform
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

from ..cliutil import backend_option, fail, user_errors


CHUNK = 8  # cases per decide_many call (the shared prompt prefix is prefilled once per call)
BATCH_CHUNK = 32  # with --prior batch: the batch the prior is estimated from (as `typedlm bench trust`)


def model_sha256(engine) -> str:
    """sha256 over the model's parameters (names, shapes, dtypes, bytes): the exact weights evaluated."""
    h = hashlib.sha256()
    for name, shape, dtype, data in _parameters(engine):
        h.update(f"{name}:{shape}:{dtype}".encode())
        h.update(data)
    return h.hexdigest()


def _parameters(engine):
    """(name, shape, dtype, raw bytes) of every parameter, sorted by name, on either backend."""
    if engine.backend == "mlx":
        import mlx.core as mx
        import numpy as np
        from mlx.utils import tree_flatten

        for name, p in sorted(tree_flatten(engine.model.parameters())):
            yield name, tuple(p.shape), str(p.dtype), np.array(p.reshape(-1).view(mx.uint8)).tobytes()
        return
    import torch

    for name, t in sorted(engine.model.state_dict().items()):
        yield name, tuple(t.shape), t.dtype, t.detach().cpu().contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes()


def provenance() -> dict:
    import importlib.metadata as md
    import os

    def ver(p):
        try:
            return md.version(p)
        except md.PackageNotFoundError:
            return None

    rev = None
    try:
        here = Path(__file__).resolve().parent
        rev = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip() or None
        if rev and subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--", "."], capture_output=True,
                                  text=True, timeout=5).stdout.strip():
            rev += "+dirty"
    except (OSError, subprocess.SubprocessError):
        pass
    return {"typedlm": ver("typedlm"), "torch": ver("torch"), "transformers": ver("transformers"),
            "xgrammar": ver("xgrammar"), "python": platform.python_version(), "git_revision": rev,
            "machine": f"{os.cpu_count()}-core {platform.machine()} {platform.system()}",
            "command": "typedlm " + " ".join(sys.argv[1:])}


def prompt_hashes(tracks, schema_dict: dict, engine) -> dict:
    """sha256 (12 hex) of each track's prompt rendered for the first case's schema with a placeholder context."""
    from ..decide.plan import compile_plan
    from ..decide.prompt import prompt_hash
    from ..decide.schema import DecisionSchema
    from .tracks import OPENAI_PROMPT_VERSION, naive_prompt

    schema = DecisionSchema.from_dict(schema_dict)
    out = {}
    for t in tracks:
        key = f"{t.name}/{t.mode}"
        if t.name == "parallel":
            out[key] = prompt_hash(compile_plan(engine.tokenizer, schema, t.mode))
            continue
        if t.name == "naive_local":
            text = naive_prompt(schema, "<context>")
        else:
            text = OPENAI_PROMPT_VERSION
        out[key] = hashlib.sha256(text.encode()).hexdigest()[:12]
    return out


def load_cases(data: str):
    from .cases import read_cases
    from .datasets import DATASETS, load

    if data in DATASETS:
        return data, load(data)
    if data.endswith(".jsonl") or Path(data).exists():
        return str(data), read_cases(Path(data))
    fail(f"--data must be one of {', '.join(DATASETS)} or a cases .jsonl file, got {data!r}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @app.command("eval")
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
        prior: str = typer.Option("neutral", "--prior",
                                  help="parallel track prior: none | neutral | batch (each chunk of --chunk cases "
                                       "decided in one decide_many call takes its own prior; needs --no-flip)"),
        calibration: Optional[Path] = typer.Option(None, "--calibration",
                                                   help="parallel track: apply this bundle (typedlm calibrate)"),
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
            return _suite(out, model=model, device=device, backend=backend, quiet=quiet, cal_limit=cal_limit,
                          datasets=tuple(d.strip() for d in datasets.split(",") if d.strip()),
                          test_limit=limit, flip_limit=flip_limit, naive_limit=naive_limit)
        if data is None:
            fail("give --data (a dataset or a cases file), or --suite")
        from .cases import data_sha256, select, with_examples
        from .runner import Run, RunError, RunLock
        from .tracks import TRACKS, NaiveTrack, OpenAITrack, ParallelTrack

        names = [t.strip() for t in track.split(",") if t.strip()]
        bad = [t for t in names if t not in TRACKS]
        if bad or not names:
            fail(f"--track: unknown track(s) {bad or names}; use a comma list of {', '.join(TRACKS)}")
        mode_list = [m.strip() for m in modes.split(",") if m.strip()]
        from ..decide.plan import SCORING_MODES

        if "parallel" in names and (not mode_list or any(m not in SCORING_MODES for m in mode_list)):
            fail(f"--modes must be a comma list of {', '.join(SCORING_MODES)}, got {modes!r}")
        if prior == "batch" and flip and "parallel" in names:
            fail("--prior batch needs --no-flip: each permuted schema is its own one-case call, which has no batch")
        if ray and prior == "batch":
            fail("--prior batch is not for --ray: the batch the prior is estimated from would depend on how Ray "
                 "spreads the cases (actors answer case by case)")
        chunk = chunk or (BATCH_CHUNK if prior == "batch" else CHUNK)
        if chunk < 1:
            fail(f"--chunk must be at least 1, got {chunk}")
        if "openai" in names and not base_url:
            fail("the openai track needs --base-url URL (an OpenAI-compatible server, e.g. typedlm serve)")
        if limit is not None and limit < 1:
            fail(f"--limit must be at least 1, got {limit}")
        with user_errors():
            from ..decide.options import DecideOptions

            opts = DecideOptions.from_flags(prior=prior, calibration=calibration)
            dataset, all_cases = load_cases(data)
            cases = select(all_cases, split, limit)
            if not cases:
                fail(f"no cases in split {split!r} of {dataset}")
            if examples:
                cases = with_examples(cases, all_cases, examples)
            engine = None
            tracks: list = []
            if "parallel" in names or "naive_local" in names:
                from ..engine import load_engine

                engine = load_engine(model, device=device, backend=backend, progress=not quiet)
            if "parallel" in names:
                from ..decide.api import prepare

                tracks += [ParallelTrack(engine, DecideOptions.make(opts, scoring=m)) for m in mode_list]
                for t in tracks:  # a bundle made for another model / prompt / scoring / prior: exit 2 now
                    prepare(cases[0].schema, [c.context for c in cases[:2]], t.options, engine=engine)
            if "naive_local" in names:
                tracks.append(NaiveTrack(engine))
            if "openai" in names:
                tracks.append(OpenAITrack(base_url, model=openai_model, api_key=api_key))
                tracks[-1].model()  # the served model's name goes into the manifest; a dead server: exit 2 now
            manifest = {"dataset": dataset, "data_sha256": data_sha256(cases), "split": split, "limit": limit,
                        "cases": len(cases), "tracks": [t.config() for t in tracks], "flip": flip,
                        "model": engine.name if engine else None,
                        "model_sha256": model_sha256(engine) if engine else None,
                          "prompts": prompt_hashes(tracks, cases[0].schema, engine) if engine else None,
                          "chunk": chunk, "examples": examples}
            from ..scale.cli import eval_answerer

            run = Run(out, manifest, tracks, provenance=provenance(), answerer=eval_answerer(
                ray, tracks, model=model, device=device, address=address, replicas=replicas))
            out.mkdir(parents=True, exist_ok=True)
            signal.signal(signal.SIGTERM, _interrupt)  # `kill PID` stops as cleanly as Ctrl-C
            try:
                with RunLock(out):
                    summary = _execute(run, cases, run.open(resume), quiet)
            except RunError as e:
                fail(str(e))
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

    @app.command("select")
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
        from .select import run_select

        try:
            ks = sorted({int(k) for k in examples.split(",") if k.strip()})
        except ValueError:
            fail(f"--examples must be a comma list of integers, got {examples!r}")
        with user_errors():
            from ..engine import load_engine

            dataset, all_cases = load_cases(data)
            engine = load_engine(model, device=device, backend=backend, progress=False)
            s = run_select(engine, dataset, all_cases, out, fit_n=fit_limit, test_n=test_limit, ks=ks, naive=naive)
        for r in s["validation"]:
            typer.echo(f"{r['variant']:>16}  validation {r['score']:.3f}  "
                       + "  ".join(f"{k} {v:.3f}" for k, v in r["fields"].items()))
        for mode, t in s["test"].items():
            typer.echo(f"test {mode} ({t['variant']}): " + "  ".join(f"{k} {v:.3f}" for k, v in t["fields"].items()))

    @app.command("report")
    def report_cmd(
        runs: list[Path] = typer.Argument(..., help="run folders (several: side by side)"),
        out: Optional[Path] = typer.Option(None, "--out", help="report folder (default: the run folder when one run)"),
        bootstrap: int = typer.Option(1000, "--bootstrap", help="bootstrap resamples for the 95 % intervals"),
        seed: int = typer.Option(0, "--seed"),
    ):
        """report.md + report.json + PNG plots (reliability, accuracy vs latency, confusion) for runs."""
        from .report import write_report

        if out is None:
            if len(runs) != 1:
                fail("several runs: give --out DIR for the combined report")
            out = runs[0]
        with user_errors():
            paths = write_report(list(runs), Path(out), n_boot=bootstrap, seed=seed)
        for p in paths:
            typer.echo(str(p))


def _suite(out: Path, *, model, device, backend, quiet, **limits) -> None:
    from ..engine import load_engine
    from .suite import run_suite

    def progress(dataset, what, k):
        typer.echo(f"suite: {dataset} {what} +{k}", err=True)

    with user_errors():
        engine = load_engine(model, device=device, backend=backend, progress=not quiet)
        run_suite(engine, out, progress=None if quiet else progress, command=provenance()["command"], **limits)
    typer.echo((out / "table.md").read_text())


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _execute(run, cases, done, quiet: bool) -> dict:
    if quiet:
        return run.execute(cases, done)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

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
