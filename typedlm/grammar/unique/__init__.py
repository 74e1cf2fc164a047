"""``uniqueItems`` enforced at decode time, beside a context-free grammar: :mod:`.plan` (where a core form
asks for unique arrays; refused where no check is exact), :mod:`.cursor` (the row's JSON as read so far),
:mod:`.guard` (the per-row mask restriction, look-ahead included)."""

from .guard import GuardedCompiled, GuardedState, vocab_of
from .plan import has_unique, unique_plan

__all__ = ["GuardedCompiled", "GuardedState", "has_unique", "unique_plan", "vocab_of"]
