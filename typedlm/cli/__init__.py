"""``typedlm`` command line: one module per command (``generate``, ``serve``, ``decide``, ``calibrate``,
``validate``, ``eval``, ``select``, ``report``, ``doctor``, ``models``, ``bench ...``), assembled in
:mod:`typedlm.cli.main`. Nothing in typedlm below this package imports it."""

from .main import app

__all__ = ["app"]
