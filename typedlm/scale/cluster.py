"""The Ray cluster a job runs on: an existing one (``address``) or a small local one started and stopped here."""

from __future__ import annotations

import contextlib
from ..config import quiet_forked_tokenizers
from ..errors import TypedLMError


class ScaleError(TypedLMError):
    """A scale-out job cannot run as asked (ray missing, bad input columns, output exists without resume)."""


def import_ray():
    try:
        import ray  # optional extra: ray
    except ImportError as e:
        raise ScaleError("--ray needs typedlm's [ray] extra: pip install 'typedlm[ray]'") from e
    return ray


@contextlib.contextmanager
def cluster(address: str | None = None, num_cpus: int | None = None):
    """Yield ``ray``, initialized. Already initialized: used as is. ``address`` None starts a local cluster
    (``num_cpus`` logical CPUs) that is shut down on exit; ``"auto"`` / ``"ray://host:10001"`` joins a running one
    (typedlm and the model must be reachable on every node)."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    quiet_forked_tokenizers()  # workers inherit it (forked tokenizers warn)
    _init(ray, address=address, num_cpus=num_cpus if address is None else None, include_dashboard=False,
          log_to_driver=True)
    try:
        yield ray
    finally:
        ray.shutdown()


START_ATTEMPTS = 3


def _init(ray, **kwargs) -> None:
    """``ray.init``, tried again when a local node fails to start: on a loaded machine the raylet gives up after a
    hard-coded 15 s wait for its dashboard agent (ray-project/ray#65983; seen here at load 12 on 2 cores)."""
    for attempt in range(START_ATTEMPTS):
        try:
            ray.init(**kwargs)
            return
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception for this
            ray.shutdown()
            if "timed out during startup" not in str(e) or attempt + 1 == START_ATTEMPTS:
                raise
