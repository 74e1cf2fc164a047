"""``typedlm decide`` and ``typedlm validate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..cliutil import backend_option, deterministic_option, fail, print_json, read_json, read_text, user_errors


def _schema_from(schema: Optional[Path], preset: Optional[str]):
    from . import presets
    from .check import unwrap
    from .schema import DecisionSchema

    if (schema is None) == (preset is None):
        fail("give exactly one of --schema FILE or --preset NAME (presets: " + ", ".join(presets.names()) + ")")
    if preset is not None:
        p = presets.load(preset)
        return p["schema"], p["examples"]
    raw, examples = unwrap(read_json(schema, "schema"))
    return DecisionSchema.from_dict(raw), examples


INPUT_CHUNK = 8  # contexts per decide_many call (one progress step)


def read_contexts(path: Path) -> list[tuple]:
    """(id, context) per line of a JSONL file: a JSON string, or an object with "context" (and optional "id")."""
    import json

    out = []
    for n, line in enumerate(read_text(path, "input").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"{path}:{n}: not valid JSON: {e}")
        if isinstance(item, dict):
            extra = sorted(set(item) - {"context", "id"})
            if extra or "context" not in item:
                fail(f"{path}:{n}: an object line needs 'context' (and may have 'id'), got keys {sorted(item)}")
            cid, text = item.get("id", n), item["context"]
        else:
            cid, text = n, item
        if not isinstance(text, str) or not text.strip():
            fail(f"{path}:{n}: the context is empty or not a string")
        out.append((cid, text))
    if not out:
        fail(f"input file '{path}' has no contexts")
    return out


def _decide_file(sch, path: Path, output: Optional[Path], opts, *, model, device, backend, prefix_cache_gb=None,
                 deterministic=None):
    """--input: decide_many over the file in chunks, a progress bar on stderr, one JSON line per context
    (prior="batch": each chunk's own prior)."""
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ..engine import load_engine
    from ..runner.prefix_cache import configure
    from .api import decide_many
    from .prior import batch_chunks, check_mode
    from .records import decision_line

    items = read_contexts(path)
    check_mode(opts.prior, len(items))
    engine = configure(load_engine(model, device=device, backend=backend, progress=False,
                                   deterministic=deterministic), prefix_cache_gb)
    sink = open(output, "w", encoding="utf-8") if output else sys.stdout
    try:
        with Progress(TextColumn("[bold]decide"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=Console(stderr=True)) as bar:
            task = bar.add_task("contexts", total=len(items))
            for a, b in batch_chunks(len(items), INPUT_CHUNK, opts.prior):
                chunk = items[a:b]
                ds = decide_many(sch, [t for _, t in chunk], opts, engine=engine)
                sink.write("".join(decision_line(cid, d) + "\n" for (cid, _), d in zip(chunk, ds)))
                sink.flush()
                bar.advance(task, len(chunk))
    finally:
        if output:
            sink.close()


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @app.command()
    def decide(
        schema: Optional[Path] = typer.Option(None, "--schema", help="decision schema JSON file"),
        preset: Optional[str] = typer.Option(None, "--preset", help="a bundled preset (see --list-presets)"),
        context: Optional[str] = typer.Option(None, "--context", help="the text to decide about"),
        context_file: Optional[Path] = typer.Option(None, "--context-file", help="read the text from a file"),
        model: str = typer.Option("default", "--model", "-m", help="default | HF dir | .gguf file | hub id"),
        scoring: str = typer.Option("labels", "--scoring", help="labels | slots"),
        none_of_above: bool = typer.Option(False, "--none-of-above", help="offer 'none of the above' on enum fields"),
        abstain_below: Optional[float] = typer.Option(None, "--abstain-below", help="abstain when margin < this"),
        prior: Optional[str] = typer.Option(None, "--prior",
                                            help="neutral (the default: divide out the content-free prior) | none | "
                                                 "batch (with --input: each chunk of contexts' own prior)"),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="bundle from `typedlm calibrate`"),
        device: str = typer.Option("auto", "--device"),
        backend: Optional[str] = backend_option(),
        as_json: bool = typer.Option(False, "--json", help="print the Decision as JSON"),
        list_presets: bool = typer.Option(False, "--list-presets", help="list bundled presets and exit"),
        input_file: Optional[Path] = typer.Option(None, "--input", help="JSONL: one context per line (a JSON string "
                                                  "or {\"context\", \"id\"}); JSONL decisions out"),
        output: Optional[Path] = typer.Option(None, "--output", help="with --input: write JSONL here (default stdout)"),
        ray: bool = typer.Option(False, "--ray", help="decide --input on Ray (typedlm[ray]; README 'Scale out')"),
        address: Optional[str] = typer.Option(None, "--address", help="with --ray: auto | ray://HOST:PORT"),
        replicas: int = typer.Option(1, "--replicas", help="with --ray: model actors"),
        gpus_per_replica: float = typer.Option(0, "--gpus-per-replica", help="with --ray: GPUs per actor"),
        resume: bool = typer.Option(False, "--resume", help="with --ray: continue --output, skipping ids written"),
        prefix_cache_gb: Optional[float] = typer.Option(None, "--prefix-cache-gb",
                                                        help="KV of the schema's prompt prefix kept across --input "
                                                             "chunks, in GB (0: off; default: the device's)"),
        deterministic: Optional[bool] = deterministic_option(),
    ):
        """Decide every field of a schema about a context: one prefill, all candidates scored in batch."""
        from . import presets as presets_mod
        from .options import DecideOptions

        if list_presets:
            for n in presets_mod.names():
                typer.echo(f"{n}\t{presets_mod.load(n)['description']}")
            return
        with user_errors():
            opts = DecideOptions.from_flags(scoring=scoring, allow_none_of_above=none_of_above,
                                            abstain_below_margin=abstain_below, prior=prior, calibration=calibration)
            sch, examples = _schema_from(schema, preset)
            if input_file is not None:
                if context is not None or context_file is not None:
                    fail("give only one of --input, --context or --context-file")
                if ray:
                    from ..scale.cli import decide_on_ray

                    return decide_on_ray(sch, input_file, output, resume=resume, address=address, replicas=replicas,
                                         gpus_per_replica=gpus_per_replica, model=model, device=device,
                                         scoring=opts.scoring, allow_none_of_above=opts.allow_none_of_above,
                                         abstain_below_margin=opts.abstain_below_margin, prior=opts.prior,
                                         calibration=opts.calibration)
                _decide_file(sch, input_file, output, opts, model=model, device=device, backend=backend,
                             prefix_cache_gb=prefix_cache_gb, deterministic=deterministic)
                return
            if context is not None and context_file is not None:
                fail("give only one of --context or --context-file")
            text = context if context is not None else (read_text(context_file, "context") if context_file else None)
            if text is None:
                if not examples:
                    fail("give --context TEXT or --context-file FILE")
                text = examples[0]
            if not text.strip():
                fail("the context is empty")
            from .prior import check_mode

            check_mode(opts.prior, 1)
            from ..engine import load_engine
            from .api import decide as run

            engine = load_engine(model, device=device, backend=backend, progress=not as_json,
                                 deterministic=deterministic)
            d = run(sch, text, opts, engine=engine)
        if as_json:
            print_json(d.to_dict())
            return
        from rich.console import Console
        from rich.table import Table

        from .result import format_value

        table = Table(title=f"decision ({d.model}, {d.scoring})")
        for col in ("field", "value", "p", "alternatives", "legal mass"):
            table.add_column(col)
        for name, f in d.fields.items():
            p = "" if f.probability is None else f"{f.probability:.2f}"
            if f.type == "multi":
                alts = ", ".join(f"{k} {v:.2f}" for k, v in f.probabilities.items())
            else:
                alts = ", ".join(f"{format_value(a['value'])} {a['probability']:.2f}" for a in f.alternatives)
            val = format_value(f.value) + (f" [{f.reason}]" if f.reason else "")
            table.add_row(name, val, p, alts, f"{f.legal_mass:.2g}")
        Console().print(table)
        typer.echo(d.summary(), err=True)
        t = d.timings
        typer.echo(f"{d.usage['prompt_tokens']} prompt tokens, {d.usage['rows']} rows in {d.usage['passes']} pass(es); "
                   f"prefill {t['prefill']*1e3:.0f} ms, scoring {t['scoring']*1e3:.0f} ms", err=True)

    @app.command()
    def calibrate(
        data: str = typer.Option(..., "--data", help="bbc | tweets | bbc-multi | news-comments | FILE.jsonl (cases)"),
        out: Path = typer.Option(..., "--out", help="where to write the bundle (JSON)"),
        priors: str = typer.Option("neutral,none", "--priors", help="prior modes each field may be given (comma "
                                   "list of neutral, none, batch; batch needs decide_many with >= 2 contexts)"),
        limit: Optional[int] = typer.Option(None, "--limit", help="the first N calibration-split cases (default all)"),
        scores: Optional[Path] = typer.Option(None, "--scores", help="scores.jsonl to reuse / extend (resumable)"),
        kind: str = typer.Option("auto", "--kind", help="scalar calibrator: auto (chosen by cross-validation "
                                 "on the calibration split) | temperature | bias | vector | matrix"),
        model: str = typer.Option("default", "--model", "-m"),
        device: str = typer.Option("auto", "--device"),
        backend: Optional[str] = backend_option(),
        as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
        quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
    ):
        """Choose each field's decision rule (prior, calibrator, multi set rule) by cross-validation on the
        calibration split only, and write the bundle; the test split is never read (evaluate with `typedlm eval`)."""
        from ..eval.calibrate_run import run_calibrate

        run_calibrate(data=data, out=out, priors=priors, limit=limit, scores=scores, kind=kind, model=model,
                      device=device, backend=backend, as_json=as_json, quiet=quiet or as_json)

    @app.command()
    def validate(
        file: Path = typer.Argument(..., help="decision schema (or preset) JSON file"),
        model: Optional[str] = typer.Option(None, "--model", "-m",
                                            help="also check tokenization with this model's tokenizer"),
        as_json: bool = typer.Option(False, "--json"),
    ):
        """Check a decision schema and lint it (errors exit 2; warnings are printed)."""
        from .check import check_schema

        with user_errors():
            tok = None
            if model:
                from transformers import AutoTokenizer

                from .. import models

                tok = AutoTokenizer.from_pretrained(models.local_dir(models.resolve(model), progress=False))
            _, out = check_schema(read_json(file, "schema"), tok)
        sch_fields, warnings, rows = out["fields"], out["warnings"], out["rows"]
        if as_json:
            print_json(out)
            return
        typer.echo(f"ok: {sch_fields} fields" + (f", rows {rows}" if rows else ""))
        for w in warnings:
            typer.echo(f"warning: {w}")
