"""Grammar layer: constraint spec, refusal of unenforceable schema keywords, compiler + cache,
and the per-row controller used by the decode loop."""

from .compiler import GrammarDisabled, Grammars
from .controller import GrammarRow
from .spec import Constraint, make_constraint

__all__ = ["Constraint", "GrammarDisabled", "GrammarRow", "Grammars", "make_constraint"]
