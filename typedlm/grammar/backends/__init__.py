"""Grammar engines behind one seam (:mod:`.base`): ``xgrammar`` (:mod:`.xgrammar`), ``llguidance``
(:mod:`.llguidance`, schema half :mod:`.llguidance_schema`) and ``handoff`` (:mod:`.handoff`: llguidance
at once, xgrammar once compiled in the background; the default); the shared bitmask (:mod:`.masks`). Only
this package imports an engine or knows which one compiled a grammar."""

from __future__ import annotations

from .base import Backend, Compiled, MaskFiller, NotForEngine, RowState
from .handoff import HandoffBackend
from .llguidance import LLGuidanceBackend
from .xgrammar import XGrammarBackend

# which backends an engine choice tries, in order (auto: llguidance where it reads the core form exactly)
ORDER = {"xgrammar": ("xgrammar",), "llguidance": ("llguidance",), "auto": ("llguidance", "xgrammar"),
         "handoff": ("handoff",)}
KINDS = {"xgrammar": XGrammarBackend.kinds, "llguidance": LLGuidanceBackend.kinds,  # constraint kinds each compiles
         "handoff": HandoffBackend.kinds}


def load(name: str, info, *, threads: int | None = None, parts=None, **xgrammar_options) -> Backend:
    """The backend ``name`` over vocabulary ``info`` (xgrammar's ``TokenizerInfo``); ImportError when its
    package is not installed. ``threads``: llguidance's mask-fill threads (None: its default);
    ``xgrammar_options``: :class:`.xgrammar.XGrammarBackend`'s size cap and disk cache; ``parts(name)``:
    the llguidance and xgrammar backends ``handoff`` drives (None: new ones)."""
    if name == "handoff":
        part = parts or (lambda n: load(n, info, threads=threads, **(xgrammar_options if n == "xgrammar" else {})))
        try:
            first = part("llguidance")
        except (ImportError, NotForEngine):  # llguidance is optional: xgrammar alone
            first = None
        return HandoffBackend(first, part("xgrammar"))
    if name == "xgrammar":
        return XGrammarBackend(info, **xgrammar_options)
    if name == "llguidance":
        return LLGuidanceBackend(info, threads=threads)
    raise ValueError(f"no grammar backend {name!r}")


__all__ = ["Backend", "Compiled", "KINDS", "MaskFiller", "NotForEngine", "ORDER", "RowState", "load"]
