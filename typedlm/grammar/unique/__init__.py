"""``uniqueItems`` enforced at decode time, beside a context-free grammar: :mod:`.plan` (where a core form
asks for unique arrays; refused where no check is exact), :mod:`.cursor` (the row's JSON as read so far),
:mod:`.guard` (the per-row mask restriction), :mod:`.lookahead` (its search for a completion that repeats
nothing), :mod:`.vocab` (the tokenizer's token classes, computed once)."""

from .guard import GuardedCompiled, GuardedState
from .plan import has_unique, unique_plan
from .vocab import vocab_of

__all__ = ["GuardedCompiled", "GuardedState", "has_unique", "unique_plan", "vocab_of"]
