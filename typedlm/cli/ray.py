"""What the ``--ray`` flags of ``typedlm decide`` / ``eval`` / ``serve`` call (the commands keep only the flags)."""

from __future__ import annotations

import typer

from .util import fail


def decide_on_ray(schema, input_file, output, *, resume: bool, address, replicas: int, gpus_per_replica: float,
                  **options) -> None:
    """``typedlm decide --input DATA --output OUT --ray``: decide_dataset, then a summary on stderr."""
    from ..scale.corpus import decide_dataset  # optional extra: typedlm[ray]

    if input_file is None or output is None:
        fail("--ray needs --input DATA (.jsonl / .parquet / .csv with 'id' and 'context') and --output OUT")
    s = decide_dataset(schema, input_file, output, resume=resume, address=address, replicas=replicas,
                       gpus_per_replica=gpus_per_replica, **options)
    typer.echo(f"decided {s['decided']} rows -> {s['output']}; skipped {len(s['skipped'])} bad rows; "
               f"{s['resumed']} already written", err=True)
    for bad in s["skipped"][:5]:
        typer.echo(f"  skipped {bad['id'] if bad['id'] is not None else bad['key']}: {bad['error']}", err=True)


SERVE_FLAGS = ("ray", "address", "replicas", "gpus_per_replica", "max_replicas")  # not ServeSettings keys


def serve_on_ray(settings, server_config, *, address, replicas: int, gpus_per_replica: float,
                 max_replicas: int | None) -> None:
    """``typedlm serve --ray``: Ray Serve replicas behind its proxy on --host/--port; Ctrl-C stops them."""
    from ..scale.serve import run  # optional extra: typedlm[ray]

    if replicas < 1 or (max_replicas is not None and max_replicas < replicas):
        fail(f"--replicas must be at least 1 and --max-replicas at least --replicas, got {replicas}, {max_replicas}")
    run(settings, server_config, address=address, replicas=replicas, gpus_per_replica=gpus_per_replica,
        min_replicas=1 if max_replicas is not None else None, max_replicas=max_replicas)


def eval_answerer(ray: bool, tracks: list, *, model: str, device: str, address, replicas: int):
    """``typedlm eval --ray``: the run's answerer (None without --ray: the single-process one)."""
    if not ray:
        return None
    from ..scale.eval import ray_answerer  # optional extra: typedlm[ray]

    return ray_answerer(tracks, model=model, device=device, replicas=replicas, address=address)
