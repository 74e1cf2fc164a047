"""xgrammar as a backend: every constraint kind; its JSON Schema compiler, or our EBNF where the core
form needs rules its JSON Schema subset lacks (:mod:`..schema.ebnf`). It precomputes a token-mask cache at
compile time, so masks are fast and compiles can be slow (MaskBench p99 seconds): a grammar whose EBNF is
over ``max_grammar_bytes`` is refused (:class:`~typedlm.errors.GrammarTooLarge`) before that work, and
compiled grammars persist on disk (:mod:`.disk_cache`) when a cache directory is given."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Any, Sequence

import torch
import xgrammar as xgr

from ...errors import GrammarTooLarge
from ..schema.ebnf import ebnf_literal, to_ebnf
from ..schema.ir import needs_grammar
from ..spec import MAX_WHITESPACE, Constraint, canonical_json
from .base import EngineState
from .disk_cache import DiskCache, fingerprint

NAME = "xgrammar"
# An entry holds the grammar's token-mask cache (3-40 MB for a 49k vocabulary) and reading one back costs
# about READ_S_PER_MB a megabyte: an entry is written (in the background) only where its compile took at
# least CACHE_MIN_S and longer than reading it back would.
CACHE_MIN_S = 0.5
READ_S_PER_MB = 0.15


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

    def __init__(self, info: xgr.TokenizerInfo, *, max_grammar_bytes: int | None = None,
                 cache_dir: Path | None = None, cache_bytes: int = 1 << 30, cache_min_s: float = CACHE_MIN_S):
        self.info = info
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=True)
        self.max_grammar_bytes = max_grammar_bytes  # json_schema/grammar EBNF past this: GrammarTooLarge
        self.cache_min_s = cache_min_s  # a compile this fast is not written to disk (0: every one is)
        self._writes = ThreadPoolExecutor(1, thread_name_prefix="typedlm-grammar-cache")  # serialize + write
        self.disk = None if cache_dir is None else DiskCache(
            cache_dir, cache_bytes, f"{fingerprint(info)}\0{NAME}\0{version('xgrammar')}")
        self.filler = XGrammarFiller()

    def compile(self, c: Constraint, source: Any) -> XGrammarCompiled:
        return XGrammarCompiled(self._compile(c, source), self.filler)

    def _compile(self, c: Constraint, source: Any) -> xgr.CompiledGrammar:
        if c.kind in ("json_schema", "json_object", "grammar"):
            grammar = json_grammar(c, source) if c.kind != "grammar" else xgr.Grammar.from_ebnf(source)
            return self._compile_grammar(grammar, c.key)
        if c.kind == "regex":
            return self.compiler.compile_regex(source)
        if c.kind == "choice":
            return self.compiler.compile_grammar("root ::= " + " | ".join(ebnf_literal(x) for x in source))
        if c.kind == "lark":
            return self.compiler.compile_lark(source)
        return self.compiler.compile_structural_tag(canonical_json(source))

    def cached(self, c: Constraint) -> bool:
        """The disk cache holds ``c``'s compiled grammar (known from its key, before any grammar is built)."""
        return self.disk is not None and self.disk.linked(c.key)

    def _compile_grammar(self, grammar: xgr.Grammar, key: str | None = None) -> xgr.CompiledGrammar:
        """``grammar`` compiled (under the size cap), from the disk cache where it holds it (``key``: the
        constraint's, linked to the entry)."""
        text = str(grammar)
        check_size(text, self.max_grammar_bytes)
        if self.disk is None:
            return self.compiler.compile_grammar(grammar)
        hit = self.disk.get(text, lambda data: xgr.CompiledGrammar.deserialize_json(data, self.info))
        if hit is not None:
            return hit
        t0 = time.perf_counter()
        compiled = self.compiler.compile_grammar(grammar)
        seconds = time.perf_counter() - t0
        if seconds >= self.cache_min_s:
            self._writes.submit(self._store, text, compiled, seconds, key)
        return compiled

    def _store(self, text: str, compiled: xgr.CompiledGrammar, seconds: float, key: str | None) -> None:
        data = compiled.serialize_json()
        if self.cache_min_s == 0 or seconds >= len(data) / 2**20 * READ_S_PER_MB:  # 0: every compile written
            self.disk.put(text, data)
            if key is not None:
                self.disk.link(key, text)

    def flush(self) -> None:
        self._writes.submit(lambda: None).result()


def json_grammar(c: Constraint, source: Any) -> xgr.Grammar:
    """The grammar of a json_schema / json_object constraint: our EBNF where the core form ``source`` has typed
    nodes (:mod:`..schema.ebnf`), else xgrammar's own conversion."""
    ws = MAX_WHITESPACE if c.any_whitespace else None
    if c.kind == "json_schema" and needs_grammar(source):
        return xgr.Grammar.from_ebnf(to_ebnf(source, any_whitespace=c.any_whitespace, strict=c.strict,
                                             max_whitespace=ws))
    return xgr.Grammar.from_json_schema(
        canonical_json(source), any_whitespace=c.any_whitespace, separators=None if c.any_whitespace else (",", ":"),
        strict_mode=c.strict if c.kind == "json_schema" else False, max_whitespace_cnt=ws)


def check_size(text: str, cap: int | None) -> None:
    """GrammarTooLarge where EBNF ``text`` is over ``cap`` bytes (None: no cap)."""
    if cap is None:
        return
    size = len(text.encode())
    if size > cap:
        raise GrammarTooLarge(size, cap)
