"""Serving replicas on Ray Serve: each replica is one engine behind typedlm's own FastAPI app (the app factory
:func:`typedlm.server.app.create_app`, wrapped, routes untouched), Ray Serve's proxy routes the requests.

A replica loads its engine in its constructor, so Ray Serve routes to it only once the model is loaded.
``gpus_per_replica`` > 0 gives each replica its own GPU(s) (Ray sets ``CUDA_VISIBLE_DEVICES``; ``--device auto``
then picks CUDA). Autoscaling: ``min_replicas`` / ``max_replicas`` (and ``target_ongoing_requests``) become
Ray Serve's ``autoscaling_config``; without them ``replicas`` is a fixed count."""

from __future__ import annotations

import signal
from typing import Any

import torch

from ..config import quiet_forked_tokenizers
from ..engine import load_engine
from ..server.app import create_app
from .cluster import cluster, import_ray

DEFAULT_TARGET_ONGOING = 4  # autoscaling: requests per replica Ray Serve aims for


def _app_builder(model: str, device: str, dtype: str | None, threads: int | None, server_config: Any):
    def build():  # runs on each replica
        if threads:
            torch.set_num_threads(threads)
        quiet_forked_tokenizers()
        return create_app(load_engine(model, device=device, dtype=dtype, progress=False), server_config)
    return build


def deployment(model: str, server_config: Any = None, *, device: str = "auto", dtype: str | None = None,
               threads: int | None = None, replicas: int = 1, gpus_per_replica: float = 0,
               cpus_per_replica: float = 1, min_replicas: int | None = None, max_replicas: int | None = None,
               target_ongoing_requests: int = DEFAULT_TARGET_ONGOING):
    """A bound Ray Serve application: ``serve.run(deployment(...), route_prefix="/")``."""
    import_ray()
    from ray import serve  # optional extra: ray

    options: dict = {"name": "typedlm", "ray_actor_options": {"num_cpus": cpus_per_replica,
                                                              "num_gpus": gpus_per_replica}}
    if min_replicas is not None or max_replicas is not None:
        options["autoscaling_config"] = {"min_replicas": min_replicas if min_replicas is not None else 1,
                                         "initial_replicas": replicas,
                                         "max_replicas": max_replicas if max_replicas is not None else replicas,
                                         "target_ongoing_requests": target_ongoing_requests}
    else:
        options["num_replicas"] = replicas
    ingress = serve.ingress(_app_builder(model, device, dtype, threads, server_config))()
    return serve.deployment(ingress).options(**options).bind()


def run(settings: Any, server_config: Any, *, address: str | None, blocking: bool = True, **options) -> None:
    """``typedlm serve --ray``: Ray Serve's proxy on ``settings.host:port``, the replicas behind it; Ctrl-C or
    SIGTERM shuts Serve down (and the local cluster, when this started one)."""
    from ray import serve  # optional extra: ray

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill PID` stops as cleanly as Ctrl-C
    with cluster(address):
        serve.start(http_options={"host": settings.host, "port": settings.port})
        serve.run(deployment(settings.model, server_config, device=settings.device, dtype=settings.dtype,
                             threads=settings.threads, **options), name="typedlm", route_prefix="/",
                  blocking=blocking)
