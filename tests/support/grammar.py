"""Grammar helpers of the tests: the default tokenizer's ``Grammars``, whole-text acceptance, renderings."""

from typedlm import config
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.controller import accepts_text as accepts
from typedlm.grammar.renderings import renderings
from typedlm.testing import default_tokenizer

__all__ = ["accepts", "default_grammars", "renderings"]


def default_grammars(engine: str | None = None) -> Grammars:
    """``Grammars`` for the default model's tokenizer; ``engine``: the grammar engine (None: the environment's)."""
    tok = default_tokenizer()
    return Grammars.for_tokenizer(tok, model_vocab_size=len(tok), stop_ids=[tok.eos_token_id],
                                  engine=engine or config.settings().grammar_engine)
