"""Every error typedlm raises on purpose. Callers (CLI, server) map these to exit 2 / HTTP 4xx."""


class TypedLMError(Exception):
    """Base class: a clear, user-facing reason in ``str(err)``."""


class ModelLoadError(TypedLMError):
    """A model reference could not be resolved or loaded."""


class GrammarCompileError(TypedLMError):
    """A constraint could not be compiled, or uses keywords the grammar would not enforce.

    ``keyword`` and ``pointer`` name the offending JSON Schema keyword and its JSON pointer when the
    refusal layer raised it.
    """

    def __init__(self, message: str, *, keyword: str | None = None, pointer: str | None = None):
        super().__init__(message)
        self.keyword = keyword
        self.pointer = pointer


class GrammarTooLarge(GrammarCompileError):
    """A grammar's EBNF is over the size cap (``Settings.max_grammar_bytes``): xgrammar would precompute its
    token masks for seconds. ``size`` and ``cap`` in bytes."""

    def __init__(self, size: int, cap: int):
        super().__init__(f"the grammar is {size:,} bytes of EBNF, over the cap of {cap:,} bytes (max_grammar_bytes): "
                         "xgrammar would precompute its masks for seconds", keyword="(grammar size)", pointer="/")
        self.size, self.cap = size, cap


class EmptySchemaError(GrammarCompileError):
    """The JSON Schema accepts no value at all (``false``, or constraints that contradict each other)."""


class ConstraintError(TypedLMError, ValueError):
    """A request named zero-or-several constraints where one is required, or bad sampling input."""


class SchemaError(TypedLMError, ValueError):
    """A decision schema is malformed (fields, constraints, dependencies); the message names the problem."""
