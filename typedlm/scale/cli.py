"""What the ``--ray`` flags of ``typedlm decide`` / ``eval`` / ``serve`` call (the commands keep only the flags)."""

from __future__ import annotations

import typer

from ..cliutil import fail


def decide_on_ray(schema, input_file, output, *, resume: bool, address, replicas: int, gpus_per_replica: float,
                  **options) -> None:
    """``typedlm decide --input DATA --output OUT --ray``: decide_dataset, then a summary on stderr."""
    from .corpus import decide_dataset

    if input_file is None or output is None:
        fail("--ray needs --input DATA (.jsonl / .parquet / .csv with 'id' and 'context') and --output OUT")
    s = decide_dataset(schema, input_file, output, resume=resume, address=address, replicas=replicas,
                       gpus_per_replica=gpus_per_replica, **options)
    typer.echo(f"decided {s['decided']} rows -> {s['output']}; skipped {len(s['skipped'])} bad rows; "
               f"{s['resumed']} already written", err=True)
    for bad in s["skipped"][:5]:
        typer.echo(f"  skipped {bad['id'] if bad['id'] is not None else bad['key']}: {bad['error']}", err=True)
