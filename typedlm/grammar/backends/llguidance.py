"""llguidance as a backend (the runtime half; the schema half: :mod:`.llguidance_schema`): JSON
constraints only. It builds a lexer and Earley parser and computes each mask when asked, so a schema
compiles in milliseconds and each mask costs host time."""

from __future__ import annotations

import threading
from typing import Any, Sequence

import torch

from ..spec import MAX_WHITESPACE, Constraint
from .base import EngineState, NotForEngine
from .llguidance_schema import llg_grammar

NAME = "llguidance"
MISSING = "the llguidance engine is not installed: pip install 'typedlm[llguidance]'"

_TOKENIZERS: dict[int, tuple] = {}  # id(info) -> (info, its llguidance tokenizer); info kept so its id stays its own
_TOKENIZERS_LOCK = threading.Lock()


def llg_tokenizer(info):
    """:func:`build_tokenizer` once per ``info`` (thread-safe)."""
    with _TOKENIZERS_LOCK:
        if id(info) not in _TOKENIZERS:
            _TOKENIZERS[id(info)] = (info, build_tokenizer(info))
        return _TOKENIZERS[id(info)][1]


def build_tokenizer(info):
    """llguidance's tokenizer over the same vocabulary (bytes per id) and stop ids as xgrammar's
    ``TokenizerInfo`` ``info``, so both engines fill the same bitmask layout. Warmed up here (the first
    mask walks the whole vocabulary, ~2 s: paid here, not by a request's compile)."""
    import llguidance  # optional extra: llguidance

    stops = list(info.stop_token_ids)
    vocab = list(info.decoded_vocab)
    special = set(info.special_token_ids) | set(stops)
    tokens = [b"\xff" + (b"<|typedlm_%d|>" % i) if i in special or not t else t for i, t in enumerate(vocab)]
    tokens += [b"\xff" + (b"<|typedlm_%d|>" % i) for i in range(len(tokens), info.vocab_size)]

    built: list = []

    class Vocab:  # what llguidance.TokenizerWrapper reads
        eos_token_id, bos_token_id, special_token_ids = stops[0], None, sorted(special)

        def __init__(self):
            self.tokens = tokens

        def __call__(self, text):  # llguidance tokenizes forced text with it: its own greedy trie walk
            if not built:
                raise TypeError("not ready")
            return built[0].greedy_tokenize(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)

    built.append(llguidance.LLTokenizer(llguidance.TokenizerWrapper(Vocab()), n_vocab=info.vocab_size,
                                        eos_token=stops))
    warm = LLGuidanceCompiled(built[0], llg_grammar({}, any_whitespace=False, max_whitespace=None, strict=False),
                              LLGuidanceFiller(1))
    warm.new_state().fill_mask(torch.full((1, (info.vocab_size + 31) // 32), -1, dtype=torch.int32), 0)
    return built[0]


class LLGuidanceFiller:
    """Fills many rows' masks in one call: llguidance's executor computes them on its own threads
    (``threads``; None: llguidance's default, 80 % of the cores, at most 32) with the GIL released. One
    row is filled on the calling thread (no handoff: batch 1)."""

    def __init__(self, threads: int | None):
        self.threads = threads
        self._executor = None
        self._lock = threading.Lock()

    def fill(self, states: Sequence["LLGuidanceState"], bitmask: torch.Tensor, rows: Sequence[int]) -> None:
        from llguidance.torch import fill_next_token_bitmask_par  # optional extra: llguidance

        if len(states) == 1:
            states[0].fill_mask(bitmask, rows[0])
            return
        with self._lock:
            if self._executor is None:
                import llguidance  # optional extra

                self._executor = llguidance.LLExecutor(self.threads)
        fill_next_token_bitmask_par(self._executor, [(s.inner, i) for s, i in zip(states, rows)], bitmask)
        for s, i in zip(states, rows):
            if s.inner.is_error():
                bitmask[i].zero_()


class LLGuidanceState(EngineState):
    def __init__(self, compiled: "LLGuidanceCompiled"):
        self.inner = compiled.proto.deep_copy()
        self.filler = compiled.filler
        self.stop_ids = compiled.stop_ids
        self._tokenizer = compiled.tokenizer

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        from llguidance.torch import fill_next_token_bitmask  # optional extra

        fill_next_token_bitmask(self.inner, bitmask, row)
        if self.inner.is_error():  # no token at all ("dead"), never a silent stop
            bitmask[row].zero_()

    def accept(self, tokens: Sequence[int]) -> bool:
        # one at a time: consume_tokens fails a stop token once the parser has stopped, consume_token takes it
        return not self.inner.is_error() and all(self.inner.consume_token(int(t)) for t in tokens)

    def accept_text(self, text: str) -> bool:
        return self.accept(self._tokenizer.greedy_tokenize(text) if text else [])

    def rollback(self, n: int) -> None:
        self.inner.rollback(n)

    def is_terminated(self) -> bool:
        return self.inner.is_stopped() and not self.inner.is_error()

    def can_end(self) -> bool:
        return self.inner.is_accepting() or self.is_terminated()

    def jump_string(self) -> str:
        forced = self.inner.compute_ff_bytes()
        for cut in range(len(forced), max(-1, len(forced) - 4), -1):  # drop a trailing partial character
            try:
                return forced[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
        return ""


class LLGuidanceCompiled:
    """A compiled llguidance grammar: a matcher in its start state that each row copies."""

    engine = NAME

    def __init__(self, tokenizer, grammar: str, filler: LLGuidanceFiller):
        import llguidance  # optional extra

        self.grammar, self.tokenizer, self.filler = grammar, tokenizer, filler
        self.proto = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self.proto.is_error():
            raise NotForEngine(f"llguidance: {self.proto.get_error().splitlines()[0]}")
        warned = self.proto.get_grammar_warnings()
        if warned:
            raise NotForEngine(f"llguidance: {warned[0]}")
        probe = self.proto.deep_copy()  # the first mask, computed now: a grammar with no JSON value fails it
        probe.compute_bitmask()
        if probe.is_error() or probe.is_accepting():  # measured: {"$ref": "#"} fails its first mask
            raise NotForEngine(f"llguidance: no JSON value fits the grammar ({probe.get_error().splitlines()[0][:80]})")
        self.stop_ids = tuple(tokenizer.eos_tokens)

    def new_state(self) -> LLGuidanceState:
        return LLGuidanceState(self)


class LLGuidanceBackend:
    """llguidance over one vocabulary (``info``: xgrammar's ``TokenizerInfo``, the project's vocabulary
    description); its tokenizer is built here (~2 s once per vocabulary), not in a request's compile.
    ImportError when llguidance is not installed."""

    name = NAME
    kinds = ("json_schema", "json_object")
    automata = False  # it reads patterns and lengths itself

    def __init__(self, info, *, threads: int | None = None):
        import llguidance  # noqa: F401  (optional extra: ImportError here when missing)

        self.tokenizer = llg_tokenizer(info)
        self.filler = LLGuidanceFiller(threads)

    def flush(self) -> None:
        """Nothing persists: llguidance's grammars are rebuilt in milliseconds."""

    def compile(self, c: Constraint, source: Any) -> LLGuidanceCompiled:
        grammar = llg_grammar(source, any_whitespace=c.any_whitespace, strict=c.strict and c.kind == "json_schema",
                              max_whitespace=MAX_WHITESPACE if c.any_whitespace else None)
        return LLGuidanceCompiled(self.tokenizer, grammar, self.filler)
