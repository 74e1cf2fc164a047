"""Decisions over a corpus on Ray Data: ``decide_dataset``.

Data flow: rows (:mod:`typedlm.scale.rows`) -> ``map_batches`` over a pool of ``replicas`` model actors
(:class:`typedlm.scale.actor.DecideActor`: one engine each, one ``decide_many`` per batch) -> the driver streams
the results into the output (:mod:`typedlm.scale.sink`), the one writer.

Nothing lost: Ray Data restarts a dead actor (``max_restarts=-1``) and retries its unfinished batch
(``max_task_retries=-1``); the driver drops a key it already wrote, so every id is written once; a crashed driver
resumes from what was written (``resume=True``)."""

from __future__ import annotations

from typing import Any, Callable

from ..decide.options import DecideOptions
from ..decide.schema import DecisionSchema
from .actor import DecideActor
from .cluster import ScaleError, cluster
from .rows import load_rows
from .sink import open_sink

BATCH_SIZE = 8  # contexts per decide_many call


def decide_dataset(schema: Any, data, output, *, model: str = "default", device: str = "auto", replicas: int = 1,
                   gpus_per_replica: float = 0, cpus_per_replica: float = 1, threads: int | None = 1,
                   batch_size: int = BATCH_SIZE, scoring: str | None = None, allow_none_of_above: bool = False,
                   abstain_below_margin: float | None = None, prior: str | None = None, calibration: Any = None,
                   order: str | None = None, resume: bool = False, address: str | None = None, num_cpus: int | None = None,
                   on_batch: Callable[[int, list], None] | None = None) -> dict:
    """Decide ``schema`` for every row of ``data`` (a path: JSONL / Parquet / CSV with ``id`` and ``context``, or a
    Ray Dataset with those columns) on ``replicas`` actors; write ``output`` (JSONL, or a ``.parquet`` folder).
    ``gpus_per_replica`` > 0 places each actor on its own GPU(s) (``device`` then defaults to CUDA). Returns a
    summary: ``decided``, ``skipped`` (bad rows with reasons), ``resumed`` (ids found already written),
    ``duplicates_dropped``, ``output``, ``busy_s`` (the first batch started to the last batch finished, on the
    actors). ``on_batch(decided_so_far, bad_rows)`` is called after each written batch.
    ``scoring`` / ``prior`` / ``order`` None: ``decide_many``'s defaults. (Imports stay light: ``typedlm bench scale`` is
    registered by the CLI, which must not load torch for ``--help``.)"""
    schema = DecisionSchema.coerce(schema)
    options = _options(scoring=scoring, allow_none_of_above=allow_none_of_above,
                       abstain_below_margin=abstain_below_margin, prior=prior, calibration=calibration,
                       order=order)
    if replicas < 1 or batch_size < 1:
        raise ScaleError(f"replicas and batch_size must be at least 1, got {replicas} and {batch_size}")
    sink = open_sink(output, resume)
    if gpus_per_replica and device == "auto":
        device = "cuda"
    decided, skipped, span = 0, [], [float("inf"), float("-inf")]
    with cluster(address, num_cpus) as ray:
        actor_args = {"schema": schema, "model": model, "device": device, "threads": threads, "options": options}
        out = load_rows(ray, data, frozenset(sink.done)).map_batches(
            DecideActor, fn_constructor_kwargs=actor_args, batch_size=batch_size, batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=replicas), num_cpus=cpus_per_replica,
            num_gpus=gpus_per_replica or None)  # Ray Data's actor pools: max_restarts=-1, max_task_retries=-1
        for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
            n, bad = sink.write(list(batch["key"]), list(batch["record"]), list(batch["error"]))
            decided += n
            skipped += bad
            if len(batch["key"]):
                span = [min(span[0], batch["started"].min()), max(span[1], batch["finished"].max())]
            if on_batch is not None:
                on_batch(decided, bad)
    return {"decided": decided, "skipped": skipped, "resumed": sink.resumed, "duplicates_dropped": sink.duplicates,
            "output": str(output), "busy_s": max(0.0, float(span[1] - span[0]))}


def _options(**given):
    """The job's DecideOptions (``None``: decide's default), checked on the driver before any actor starts: a
    setting that would fail every batch fails here, not as a bad row each."""
    if given.get("prior") == "batch":
        raise ScaleError("prior='batch' would estimate each batch's prior from however Ray splits the data: "
                         "use 'neutral' or 'none' on Ray")
    return DecideOptions.make(**{k: v for k, v in given.items() if v is not None})
