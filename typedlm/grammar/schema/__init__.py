"""JSON Schema -> a schema xgrammar enforces exactly, or a refusal naming the keyword and pointer.

``refusal``: the :class:`Refusal` record, the keyword vocabulary and the ``pattern`` rewrite.
``rewrites``: the normalizer that turns any accepted schema into the *core form* (single-type
branches, ``anyOf``, ``enum``, local ``$ref``) whose every keyword xgrammar enforces, or that
:mod:`.ebnf` writes as grammar rules of ours; its parts: ``branches``, ``build``, ``algebra``,
``emit``, ``keys``.
"""

from .refusal import Refusal
from .rewrites import find_refusals, prepare_lenient, prepare_relaxed, prepare_schema

__all__ = ["Refusal", "find_refusals", "prepare_lenient", "prepare_relaxed", "prepare_schema"]
