"""``typedlm bench`` commands of decisions: latency and throughput, trust (prior, calibration), Ray scale-out."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from ..util import backend_option, fail, print_json, user_errors


def bench_decide(
    model: str = typer.Option("default", "--model", "-m", help="model reference (ignored with --arch)"),
    arch: Optional[str] = typer.Option(None, "--arch", help="random-weight real architecture, e.g. qwen2.5-7b"),
    device: str = typer.Option("auto", "--device"),
    backend: Optional[str] = backend_option(),
    preset: str = typer.Option("support_triage", "--preset"),
    runs: int = typer.Option(5, "--runs"),
    naive_runs: int = typer.Option(2, "--naive-runs"),
    many: str = typer.Option("1,16,64", "--many", help="decide_many batch sizes (comma list; empty: skip)"),
    many_runs: int = typer.Option(3, "--many-runs"),
    skip_single: bool = typer.Option(False, "--skip-single", help="only the decide_many part"),
    out: Optional[Path] = typer.Option(None, "--out", help="write JSON here (and .md beside it)"),
    machine: Optional[str] = typer.Option(None, "--machine", help="machine description for the report"),
    invariance: str = typer.Option("", "--invariant", help="batch-invariant scoring: on, off, or on,off (both, "
                                   "one run); empty: the runner's default"),
):
    """p50 latency: decide (labels/slots x packed/expand) vs naive JSON generation vs bare prefill."""
    from ...bench.decide import _one_setting, to_markdown  # lazy: CLI start-up
    from ...testing.archs import bench_engine  # lazy: CLI start-up

    with user_errors():
        engine = bench_engine(arch, model, device=device, backend=backend)
        sizes = [int(x) for x in many.split(",") if x.strip()]
        if any(n < 1 for n in sizes):
            raise ValueError(f"--many takes positive batch sizes, got {many!r}")
        say = lambda m: typer.echo(m, err=True)  # noqa: E731
        settings = [x.strip() for x in invariance.split(",") if x.strip()]
        if any(x not in ("on", "off") for x in settings):
            raise ValueError(f"--invariant takes on, off or on,off; got {invariance!r}")
        parts = {}
        for setting in settings or [None]:
            if setting is not None:
                engine.runner.set_invariant(setting == "on")
            parts[setting] = _one_setting(engine, preset, skip_single, runs, naive_runs, sizes, many_runs, say)
        r = parts[None] if None in parts else {**{k: v for k, v in next(iter(parts.values())).items()
                                                 if k in ("model", "device", "machine", "dtype", "preset",
                                                          "fields")}, "invariance": parts}
    if machine:
        r["machine"] = machine
    command = "typedlm bench decide " + shlex.join(sys.argv[sys.argv.index("decide") + 1:]
                                                   if "decide" in sys.argv else [])
    r["command"] = command.strip()
    print_json(r)
    md = to_markdown(r, r["command"])
    typer.echo(md, err=True)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(r, indent=2, ensure_ascii=False) + "\n")
        out.with_suffix(".md").write_text(md)


def trust(
    data: str = typer.Option("tweets,bbc,bbc-multi", "--data", help="comma list of eval datasets"),
    out: Path = typer.Option(Path("trust-runs"), "--out", help="folder: one run folder per dataset"),
    fit_limit: str = typer.Option("60", "--fit-limit", help="calibration-split cases to fit on: N or "
                                  "dataset=N,... (per dataset)"),
    test_limit: str = typer.Option("200", "--test-limit", help="test-split cases: N or dataset=N,..."),
    batch: int = typer.Option(32, "--batch", help="contexts per decide_many call for prior='batch'"),
    model: str = typer.Option("default", "--model", "-m"),
    device: str = typer.Option("auto", "--device"),
    backend: Optional[str] = backend_option(),
    bootstrap: int = typer.Option(1000, "--bootstrap"),
    reuse: Optional[Path] = typer.Option(None, "--reuse", help="folder of `typedlm eval` runs (eval-<dataset>/): "
                                         "cases they scored with the same prompt are not scored again"),
):
    """Raw vs prior vs calibrated decisions on labelled data; writes run folders + one eval report."""
    from ...bench.trust import _limits, run_dataset, summary_table  # lazy: CLI start-up
    from ...engine import load_engine  # lazy: CLI start-up
    from ...eval.datasets import load_cases  # lazy: CLI start-up
    from ...eval.report import write_report  # lazy: CLI start-up

    names = [d.strip() for d in data.split(",") if d.strip()]
    if not names:
        fail("--data is empty")
    with user_errors():
        fits, tests = _limits(fit_limit, names, "--fit-limit"), _limits(test_limit, names, "--test-limit")
        engine = load_engine(model, device=device, backend=backend, progress=False)
        sums, folders = [], []
        for n in names:
            name, cases = load_cases(n)
            folders.append(out / Path(name).stem)  # a dataset name, or a cases file's stem
            prev = reuse / f"eval-{Path(name).stem}" / "predictions.jsonl" if reuse else None
            sums.append(run_dataset(engine, name, cases, folders[-1], fits[n], tests[n], batch, prev))
        (out / "summary.json").write_text(json.dumps(sums, indent=2) + "\n")
        paths = write_report(folders, out, n_boot=bootstrap)
        table = summary_table(sums, json.loads((out / "report.json").read_text()))
        (out / "trust.md").write_text(table)
    typer.echo(table)
    for p in paths[:2]:
        typer.echo(str(p), err=True)


def scale_cmd(
    actors: str = typer.Option("1,2", "--actors", help="comma list of actor counts"),
    contexts: int = typer.Option(256, "--contexts", help="rows in the corpus"),
    tokens: int = typer.Option(200, "--tokens", help="tokens per context"),
    batch: int = typer.Option(8, "--batch", help="contexts per decide_many call"),
    threads: int = typer.Option(1, "--threads", help="torch threads per actor (and for the baseline)"),
    preset: str = typer.Option("support_triage", "--preset"),
    out: Optional[Path] = typer.Option(None, "--out", help="also write the JSON here"),
):
    """Corpus decisions on a local Ray cluster, tiny random model: 1 vs N actors (CPU)."""
    from ...scale.bench import run  # lazy: CLI start-up

    result = run([int(a) for a in actors.split(",")], contexts=contexts, tokens=tokens, batch=batch,
                 threads=threads, preset=preset)
    typer.echo(json.dumps(result, indent=2))
    if out:
        out.write_text(json.dumps(result, indent=2) + "\n")
    typer.echo(f"{'actors':>6} {'fd/s steady':>12} {'speedup':>8} {'fd/s wall':>10} {'projected':>10}", err=True)
    for r in result["runs"]:
        typer.echo(f"{r['actors']:>6} {r['field_decisions_per_s']:>12.0f} {r['speedup_vs_first']:>8.2f} "
                   f"{r['field_decisions_per_s_wall']:>10.0f} {r['projected_field_decisions_per_s']:>10.0f}",
                   err=True)
    typer.echo(f"single process, {threads} thread(s): {result['single_process_field_decisions_per_s']:.0f} fd/s",
               err=True)
