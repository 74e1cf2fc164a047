"""Scale-out on Ray (the ``typedlm[ray]`` extra; nothing else in typedlm imports ray, and importing this package
does not either: ray loads when a job starts).

| module | role |
|---|---|
| ``cluster.py`` | join a cluster (``address``) or start a small local one and stop it after |
| ``rows.py`` | JSONL / Parquet / CSV (Ray Data readers) -> ``key, context, error`` rows; bad rows keep a reason |
| ``actor.py`` | ``DecideActor``: one engine per actor, one ``decide_many`` per batch |
| ``sink.py`` | the driver's writer: JSONL (fsync per batch) or a Parquet folder; each id once; resume |
| ``corpus.py`` | ``decide_dataset``: rows -> actor pool (``map_batches``) -> sink |
| ``eval.py`` | ``typedlm eval --ray``: an answerer for ``eval.runner.Run`` (cases over actors; the driver journals) |
| ``serve.py`` | Ray Serve replicas, typedlm's FastAPI app factory as the ingress |
| ``cli.py`` | what the ``--ray`` flags of ``decide`` / ``eval`` / ``serve`` call |
| ``bench.py`` | ``typedlm bench scale`` |

Invariants (``tests/scale/``): the corpus path gives the decisions of single-process ``decide_many`` for
every id; a SIGKILLed actor is restarted (Ray Data's actor pools: ``max_restarts=-1``, ``max_task_retries=-1``)
and every id is still written exactly once; a crashed driver resumes from the output (``--resume``); eval with
``--ray`` writes the predictions of the single-process run; Serve replicas answer chat, streams and decide.

Scaling model: field decisions/s ≈ actors × one actor's ``decide_many`` rate (its batch on its device), less
Ray's per-batch overhead (serialising a batch in and its JSON lines out, the driver's fsync) and, on a shared
CPU, the cores the actors compete for. The driver is one process that writes every line: with enough actors
it becomes the bound (a fast GPU actor writes tens of lines a second). Numbers: docs/benchmarks.md.
GPU placement (``num_gpus`` per actor / replica) is planned in code and tested on the CPU only: the lent GPU
machine has no Ray.
"""

from .corpus import decide_dataset

__all__ = ["decide_dataset"]
