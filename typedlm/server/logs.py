"""Logging for ``typedlm serve``: the ``typedlm`` logger (model load, readiness, engine errors) goes
through uvicorn's own handlers and formatter at the same ``--log-level``."""

from __future__ import annotations

import copy


def uvicorn_log_config(level: str) -> dict:
    """uvicorn's default dictConfig plus the ``typedlm`` logger on its ``default`` handler (stderr)."""
    from uvicorn.config import LOGGING_CONFIG  # optional extra: server

    cfg = copy.deepcopy(LOGGING_CONFIG)
    cfg["loggers"]["typedlm"] = {"handlers": ["default"], "level": "DEBUG" if level == "trace" else level.upper(),
                                 "propagate": False}
    return cfg
