"""xgrammar as a backend: every constraint kind; its JSON Schema compiler, or our EBNF where the core
form needs rules its JSON Schema subset lacks (:mod:`..schema.ebnf`). It precomputes a token-mask cache at
compile time, so masks are fast and compiles can be slow (MaskBench p99 seconds)."""

from __future__ import annotations

from typing import Any, Sequence

import torch
import xgrammar as xgr

from ..schema.ebnf import ebnf_literal, to_ebnf
from ..schema.ir import needs_grammar
from ..spec import MAX_WHITESPACE, Constraint, canonical_json
from .base import EngineState

NAME = "xgrammar"


class XGrammarFiller:
    """xgrammar's batched mask fill (``BatchGrammarMatcher``: its own threads, the GIL released)."""

    def __init__(self):
        self._batch = xgr.BatchGrammarMatcher()

    def fill(self, states: Sequence["XGrammarState"], bitmask: torch.Tensor, rows: Sequence[int]) -> None:
        self._batch.batch_fill_next_token_bitmask([s.matcher for s in states], bitmask, list(rows))


class XGrammarState(EngineState):
    def __init__(self, compiled: xgr.CompiledGrammar, filler: XGrammarFiller):
        self.matcher = xgr.GrammarMatcher(compiled)
        self.filler = filler
        self.stop_ids = tuple(self.matcher.stop_token_ids)

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        self.matcher.fill_next_token_bitmask(bitmask, row)

    def accept(self, tokens: Sequence[int]) -> bool:
        return all(self.matcher.accept_token(int(t)) for t in tokens)

    def accept_text(self, text: str) -> bool:
        return self.matcher.accept_string(text)

    def rollback(self, n: int) -> None:
        self.matcher.rollback(n)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def can_end(self) -> bool:
        return self.matcher.is_completed() or self.matcher.is_terminated()

    def jump_string(self) -> str:
        return self.matcher.find_jump_forward_string()


class XGrammarCompiled:
    engine = NAME

    def __init__(self, compiled: xgr.CompiledGrammar, filler: XGrammarFiller):
        self.compiled, self._filler = compiled, filler

    def new_state(self) -> XGrammarState:
        return XGrammarState(self.compiled, self._filler)


class XGrammarBackend:
    """xgrammar over one vocabulary (``info``, the project's vocabulary description)."""

    name = NAME
    kinds = ("json_schema", "json_object", "regex", "choice", "grammar", "lark", "structural_tag")
    automata = True

    def __init__(self, info: xgr.TokenizerInfo):
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=True)
        self.filler = XGrammarFiller()

    def compile(self, c: Constraint, source: Any) -> XGrammarCompiled:
        return XGrammarCompiled(self._compile(c, source), self.filler)

    def _compile(self, c: Constraint, source: Any) -> xgr.CompiledGrammar:
        ws = MAX_WHITESPACE if c.any_whitespace else None
        if c.kind in ("json_schema", "json_object"):
            if c.kind == "json_schema" and needs_grammar(source):
                return self.compiler.compile_grammar(to_ebnf(source, any_whitespace=c.any_whitespace,
                                                             strict=c.strict, max_whitespace=ws))
            return self.compiler.compile_json_schema(
                canonical_json(source), any_whitespace=c.any_whitespace,
                separators=None if c.any_whitespace else (",", ":"),
                strict_mode=c.strict if c.kind == "json_schema" else False, max_whitespace_cnt=ws)
        if c.kind == "regex":
            return self.compiler.compile_regex(source)
        if c.kind == "choice":
            return self.compiler.compile_grammar("root ::= " + " | ".join(ebnf_literal(x) for x in source))
        if c.kind == "grammar":
            return self.compiler.compile_grammar(source)
        if c.kind == "lark":
            return self.compiler.compile_lark(source)
        return self.compiler.compile_structural_tag(canonical_json(source))
