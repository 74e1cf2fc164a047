"""``typedlm eval --ray``: the cases spread over model actors, one engine each; the driver's run loop
(:class:`typedlm.eval.runner.Run`) stays the one writer of predictions.jsonl and the journal, so the run folder,
manifest, journal and resume are exactly those of a single-process run.

An actor rebuilds the local tracks (``parallel`` per mode with its ``DecideOptions``, ``naive_local``) on its own engine
and answers whole cases (:func:`typedlm.eval.runner.case_lines`). A dead actor is restarted and its case retried
(``max_restarts`` / ``max_task_retries`` -1); results come back in completion order, each case once."""

from __future__ import annotations

import torch

from ..engine import load_engine
from ..errors import TypedLMError
from ..eval.runner import case_lines
from ..eval.tracks import NaiveTrack, ParallelTrack
from .cluster import ScaleError, cluster

LOCAL_TRACKS = ("parallel", "naive_local")


class EvalActor:
    def __init__(self, specs: list[tuple], model: str, device: str, threads: int | None):
        if threads:
            torch.set_num_threads(threads)
        engine = load_engine(model, device=device, progress=False)
        self.tracks = [ParallelTrack(engine, options) if name == "parallel" else NaiveTrack(engine)
                       for name, options in specs]

    def answer(self, case, manifest: dict):
        try:
            return case, case_lines(case, self.tracks, manifest)
        except TypedLMError as e:
            return case, e


def ray_answerer(tracks: list, *, model: str, device: str, replicas: int, gpus_per_replica: float = 0,
                 threads: int | None = 1, address: str | None = None, num_cpus: int | None = None):
    """An answerer for ``Run(..., answerer=...)``: ``(case, lines or error)`` as the actors finish them."""
    bad = [t.name for t in tracks if t.name not in LOCAL_TRACKS]
    if bad:
        raise ScaleError(f"--ray runs the local tracks ({', '.join(LOCAL_TRACKS)}); run {bad} without --ray")
    if replicas < 1:
        raise ScaleError(f"--replicas must be at least 1, got {replicas}")
    specs = [(t.name, getattr(t, "options", None)) for t in tracks]  # DecideOptions travel as they are
    if gpus_per_replica and device == "auto":
        device = "cuda"

    def answer(cases, _tracks, manifest):
        with cluster(address, num_cpus) as ray:
            from ray.util import ActorPool  # optional extra: ray

            actor = ray.remote(EvalActor).options(num_cpus=1, num_gpus=gpus_per_replica, max_restarts=-1,
                                                  max_task_retries=-1)
            pool = ActorPool([actor.remote(specs, model, device, threads) for _ in range(replicas)])
            yield from pool.map_unordered(lambda a, case: a.answer.remote(case, manifest), cases)
    return answer
