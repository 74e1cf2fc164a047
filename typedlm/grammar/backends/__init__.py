"""Grammar engines behind one seam (:mod:`.base`): ``xgrammar`` (:mod:`.xgrammar`) and ``llguidance``
(:mod:`.llguidance`, schema half :mod:`.llguidance_schema`); the shared bitmask (:mod:`.masks`). Only
this package imports an engine or knows which one compiled a grammar."""

from __future__ import annotations

from .base import Backend, Compiled, MaskFiller, NotForEngine, RowState
from .llguidance import LLGuidanceBackend
from .xgrammar import XGrammarBackend

# which backends an engine choice tries, in order (auto: llguidance where it reads the core form exactly)
ORDER = {"xgrammar": ("xgrammar",), "llguidance": ("llguidance",), "auto": ("llguidance", "xgrammar")}
KINDS = {"xgrammar": XGrammarBackend.kinds, "llguidance": LLGuidanceBackend.kinds}  # constraint kinds each compiles


def load(name: str, info, *, threads: int | None = None, **xgrammar_options) -> Backend:
    """The backend ``name`` over vocabulary ``info`` (xgrammar's ``TokenizerInfo``); ImportError when its
    package is not installed. ``threads``: llguidance's mask-fill threads (None: its default);
    ``xgrammar_options``: :class:`.xgrammar.XGrammarBackend`'s size cap and disk cache."""
    if name == "xgrammar":
        return XGrammarBackend(info, **xgrammar_options)
    if name == "llguidance":
        return LLGuidanceBackend(info, threads=threads)
    raise ValueError(f"no grammar backend {name!r}")


__all__ = ["Backend", "Compiled", "KINDS", "MaskFiller", "NotForEngine", "ORDER", "RowState", "load"]
