"""``typedlm decide``: decide every field of a schema about a context, or about each line of a JSONL file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .ray import decide_on_ray
from .util import backend_option, deterministic_option, fail, print_json, read_json, read_text, user_errors

INPUT_CHUNK = 8  # contexts per decide_many call (one progress step)


def schema_from(schema: Optional[Path], preset: Optional[str]):
    """(DecisionSchema, examples) of ``--schema FILE`` or ``--preset NAME`` (exactly one)."""
    from ..decide import presets  # lazy: CLI start-up
    from ..decide.check import unwrap  # lazy: CLI start-up
    from ..decide.schema import DecisionSchema  # lazy: CLI start-up

    if (schema is None) == (preset is None):
        fail("give exactly one of --schema FILE or --preset NAME (presets: " + ", ".join(presets.names()) + ")")
    if preset is not None:
        p = presets.load(preset)
        return p["schema"], p["examples"]
    raw, examples = unwrap(read_json(schema, "schema"))
    return DecisionSchema.from_dict(raw), examples


def read_contexts(path: Path) -> list[tuple]:
    """(id, context) per line of a JSONL file: a JSON string, or an object with "context" (and optional "id")."""
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


def decide_file(sch, path: Path, output: Optional[Path], opts, *, model, device, backend, prefix_cache_gb=None,
                deterministic=None):
    """--input: decide_many over the file in chunks, a progress bar on stderr, one JSON line per context
    (prior="batch": each chunk's own prior)."""
    from rich.console import Console  # lazy: CLI start-up
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn  # lazy: CLI

    from ..decide.api import decide_many  # lazy: CLI start-up
    from ..decide.prior import batch_chunks, check_mode  # lazy: CLI start-up
    from ..decide.records import decision_line  # lazy: CLI start-up
    from ..engine import load_engine  # lazy: CLI start-up
    from ..runner.prefix_cache import configure  # lazy: CLI start-up

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
                                        help="auto (the default: none for boolean fields, neutral for the others) | "
                                             "neutral (divide out the content-free prior) | none | "
                                             "batch (with --input: each chunk of contexts' own prior)"),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="bundle from `typedlm calibrate`"),
    order: Optional[str] = typer.Option(None, "--order", help="given (the default) | averaged: each choice field scored "
                                        "in two fixed orders, averaged (order-invariant; 2x the model work)"),
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
    from ..decide.options import DecideOptions  # lazy: CLI start-up

    if list_presets:
        return _list_presets()
    with user_errors():
        opts = DecideOptions.from_flags(scoring=scoring, allow_none_of_above=none_of_above,
                                        abstain_below_margin=abstain_below, prior=prior, calibration=calibration,
                                        order=order)
        sch, examples = schema_from(schema, preset)
        if input_file is not None:
            if context is not None or context_file is not None:
                fail("give only one of --input, --context or --context-file")
            if ray:
                return decide_on_ray(sch, input_file, output, resume=resume, address=address, replicas=replicas,
                                     gpus_per_replica=gpus_per_replica, model=model, device=device,
                                     scoring=opts.scoring, allow_none_of_above=opts.allow_none_of_above,
                                     abstain_below_margin=opts.abstain_below_margin, prior=opts.prior,
                                     calibration=opts.calibration, order=opts.order)
            return decide_file(sch, input_file, output, opts, model=model, device=device, backend=backend,
                               prefix_cache_gb=prefix_cache_gb, deterministic=deterministic)
        text = _context_text(context, context_file, examples)
        d = _decide_one(sch, text, opts, model=model, device=device, backend=backend, progress=not as_json,
                        deterministic=deterministic)
    if as_json:
        print_json(d.to_dict())
    else:
        print_decision(d)


def _list_presets() -> None:
    from ..decide import presets  # lazy: CLI start-up

    for n in presets.names():
        typer.echo(f"{n}\t{presets.load(n)['description']}")


def _context_text(context: Optional[str], context_file: Optional[Path], examples: list) -> str:
    """The one context of --context / --context-file, else the preset's first example."""
    if context is not None and context_file is not None:
        fail("give only one of --context or --context-file")
    text = context if context is not None else (read_text(context_file, "context") if context_file else None)
    if text is None:
        if not examples:
            fail("give --context TEXT or --context-file FILE")
        text = examples[0]
    if not text.strip():
        fail("the context is empty")
    return text


def _decide_one(sch, text: str, opts, *, model, device, backend, progress: bool, deterministic):
    from ..decide.api import decide as run  # lazy: CLI start-up
    from ..decide.prior import check_mode  # lazy: CLI start-up
    from ..engine import load_engine  # lazy: CLI start-up

    check_mode(opts.prior, 1)
    engine = load_engine(model, device=device, backend=backend, progress=progress, deterministic=deterministic)
    return run(sch, text, opts, engine=engine)


def print_decision(d) -> None:
    """A table of the fields (value, p, alternatives, legal mass), the summary and the timings on stderr."""
    from rich.console import Console  # lazy: CLI start-up
    from rich.table import Table  # lazy: CLI start-up

    from ..decide.result import format_value  # lazy: CLI start-up

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
