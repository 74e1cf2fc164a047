"""``typedlm decide`` and ``typedlm validate``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..cliutil import fail, print_json, read_json, read_text, user_errors


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
        device: str = typer.Option("auto", "--device"),
        as_json: bool = typer.Option(False, "--json", help="print the Decision as JSON"),
        list_presets: bool = typer.Option(False, "--list-presets", help="list bundled presets and exit"),
    ):
        """Decide every field of a schema about a context: one prefill, all candidates scored in batch."""
        from . import presets as presets_mod

        if list_presets:
            for n in presets_mod.names():
                typer.echo(f"{n}\t{presets_mod.load(n)['description']}")
            return
        with user_errors():
            sch, examples = _schema_from(schema, preset)
            if context is not None and context_file is not None:
                fail("give only one of --context or --context-file")
            text = context if context is not None else (read_text(context_file, "context") if context_file else None)
            if text is None:
                if not examples:
                    fail("give --context TEXT or --context-file FILE")
                text = examples[0]
            if not text.strip():
                fail("the context is empty")
            from .plan import SCORING_MODES

            if scoring not in SCORING_MODES:
                fail(f"--scoring must be one of {', '.join(SCORING_MODES)}, got {scoring!r}")
            if abstain_below is not None and not 0.0 <= abstain_below <= 1.0:
                fail(f"--abstain-below must be in [0, 1], got {abstain_below}")
            from ..engine import load_engine
            from .api import decide as run

            engine = load_engine(model, device=device, progress=not as_json)
            d = run(sch, text, engine=engine, scoring=scoring, allow_none_of_above=none_of_above,
                    abstain_below_margin=abstain_below)
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
        t = d.timings
        typer.echo(f"{d.usage['prompt_tokens']} prompt tokens, {d.usage['rows']} rows in {d.usage['passes']} pass(es); "
                   f"prefill {t['prefill']*1e3:.0f} ms, scoring {t['scoring']*1e3:.0f} ms", err=True)

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
