"""``typedlm validate``: check a decision schema and lint it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .util import print_json, read_json, user_errors


def validate(
    file: Path = typer.Argument(..., help="decision schema (or preset) JSON file"),
    model: Optional[str] = typer.Option(None, "--model", "-m",
                                        help="also check tokenization with this model's tokenizer"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Check a decision schema and lint it (errors exit 2; warnings are printed)."""
    from ..decide.check import check_schema  # lazy: CLI start-up

    with user_errors():
        tok = None
        if model:
            from transformers import AutoTokenizer  # lazy: CLI start-up

            from .. import models  # lazy: CLI start-up

            tok = AutoTokenizer.from_pretrained(models.local_dir(models.resolve(model), progress=False))
        _, out = check_schema(read_json(file, "schema"), tok)
    sch_fields, warnings, rows = out["fields"], out["warnings"], out["rows"]
    if as_json:
        print_json(out)
        return
    typer.echo(f"ok: {sch_fields} fields" + (f", rows {rows}" if rows else ""))
    for w in warnings:
        typer.echo(f"warning: {w}")
