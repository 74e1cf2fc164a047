"""The per-row guard: masks the tokens that would finish an item equal to an earlier item of its unique
array, and the tokens after which every completion of the open items repeats one (a look-ahead search).

:class:`GuardedCompiled` wraps a backend's compiled grammar; its :class:`GuardedState` wraps the engine's
row state (a :class:`..backends.RowState` itself): masks are narrowed after each fill (``fill_mask``, or
``restrict`` after a batched fill of ``base``), ``accept`` feeds the cursor, the jump-forward string is cut
before a repeat. The grammar stays context-free; the guard reads the emitted text with a
:class:`.cursor.Cursor`.

- **Sound**: each allowed token that could finish an item (outside a string: any; inside one: those
  with a quote) is read on a copy of the cursor; one that finishes a repeated item is masked.
- **Live**: where a token leaves an open item written as the first half or more of an earlier one (of a
  small item space, ``Loc.small``: any start, or a new item not begun), a depth-first search over
  single-byte tokens on the row's own engine state (accept, then roll back) looks for a completion of the outermost such item that repeats nothing; the token is
  masked only when the search proves there is none (a finite item space used up: an enum of N values
  with ``minItems`` N completes). A search past its budget leaves the token allowed.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from .cursor import WS, Cursor
from .plan import Plan

SEARCH_NODES = 48  # steps (a byte, or the grammar's forced bytes) one look-ahead search may take
STEP_NODES = 128  # look-ahead steps one mask may spend in all
CLOSERS = b'"]}'


class Vocab:
    """The bytes of every token id of one tokenizer (stop and special ids: none) and the masks the guard reads."""

    def __init__(self, info):
        special = set(info.special_token_ids) | set(info.stop_token_ids)
        decoded = list(info.decoded_vocab)
        self.size = info.vocab_size
        self.bytes = [b"" if i in special or i >= len(decoded) else decoded[i] for i in range(self.size)]
        self.quote = np.array([b'"' in t for t in self.bytes] + [False] * 32)
        self.bracket = np.array([b"[" in t for t in self.bytes] + [False] * 32)
        self.comma = np.array([b"," in t for t in self.bytes] + [False] * 32)
        # a quote, then a ']' or '}': a token that may close a string and the container around it
        self.quote_close = np.array([b'"' in t and (b"]" in t.split(b'"', 1)[1] or b"}" in t.split(b'"', 1)[1])
                                     for t in self.bytes] + [False] * 32)
        self.blank = np.array([bool(t) and not t.strip(bytes(WS)) for t in self.bytes] + [False] * 32)
        self.byte_token: dict[int, int] = {}
        for i, t in enumerate(self.bytes):
            if len(t) == 1:
                self.byte_token.setdefault(t[0], i)
        self.byte_values = np.array(sorted(self.byte_token), dtype=np.int64)
        ids = np.array([self.byte_token[b] for b in self.byte_values], dtype=np.int64)
        self.byte_words, self.byte_bits = ids // 32, ids % 32
        self.by_text: dict[bytes, list[int]] = {}
        for i, t in enumerate(self.bytes):
            if t:
                self.by_text.setdefault(t, []).append(i)


_VOCABS: dict[int, tuple] = {}
_LOCK = threading.Lock()


def vocab_of(info) -> Vocab:
    """:class:`Vocab` once per tokenizer info (kept with it so its id stays its own)."""
    with _LOCK:
        if id(info) not in _VOCABS:
            _VOCABS[id(info)] = (info, Vocab(info))
        return _VOCABS[id(info)][1]


class GuardedCompiled:
    """A backend's compiled grammar (``inner``) whose schema asks for unique arrays, with the plan and the
    vocabulary the guard reads: another :class:`..backends.Compiled` (its rows: :class:`GuardedState`)."""

    def __init__(self, inner, plan: Plan, vocab: Vocab):
        self.inner, self.plan, self.vocab = inner, plan, vocab
        self.engine = inner.engine

    def new_state(self) -> "GuardedState":
        return GuardedState(self, self.inner.new_state())


class GuardedState:
    """One row's state: the engine's row state (``inner``) and the cursor over the text it accepted. Masks
    come from the engine (alone, or in its filler's batch over ``base``), then :meth:`restrict` narrows them."""

    def __init__(self, grammar: GuardedCompiled, inner):
        self.inner, self.plan, self.vocab = inner, grammar.plan, grammar.vocab
        self.stop_ids = inner.stop_ids
        self.cursor = Cursor(grammar.plan.root)
        self.prefix, self.tokens = b"", []  # text before the tokens (accept_text), each accepted token's bytes
        self.scratch = torch.zeros(1, (self.vocab.size + 31) // 32, dtype=torch.int32)
        self.nodes = 0

    @property
    def filler(self):  # read each time: an engine state may move to another engine (backends.handoff)
        return self.inner.filler

    @property
    def base(self):
        return self.inner.base

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        self.inner.fill_mask(bitmask, row)
        self._restrict(bitmask[row])

    def restrict(self, bitmask: torch.Tensor, row: int) -> bool:
        """Narrow the mask the filler wrote into row ``row`` for :attr:`base`; True if a token was cleared."""
        inner = self.inner.restrict(bitmask, row)
        return self._restrict(bitmask[row]) or inner

    def accept(self, tokens) -> bool:
        """Advance the engine and the cursor; False where a token repeats an item (never, when every mask
        was restricted)."""
        if not self.inner.accept(tokens):
            return False
        data = [self.vocab.bytes[int(t)] for t in tokens]
        self.tokens += data
        return all(self.cursor.feed_bytes(d) for d in data)

    def accept_text(self, text: str) -> bool:
        data = text.encode("utf-8")
        if not self.inner.accept_text(text):
            return False
        self.prefix, self.tokens = self.prefix + b"".join(self.tokens) + data, []
        return self.cursor.feed_bytes(data)

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` tokens accepted by :meth:`accept` (the cursor re-reads what is left)."""
        if n > len(self.tokens):
            raise ValueError(f"cannot roll back {n} tokens: {len(self.tokens)} accepted since the last accept_text")
        self.inner.rollback(n)
        del self.tokens[len(self.tokens) - n:]
        self.cursor = Cursor(self.plan.root)
        self.cursor.feed_bytes(self.prefix + b"".join(self.tokens))

    def is_terminated(self) -> bool:
        return self.inner.is_terminated()

    def can_end(self) -> bool:
        return self.inner.can_end()

    def jump_string(self) -> str:
        forced = self.inner.jump_string()
        return self.cut(forced) if forced else forced

    def cut(self, forced: str) -> str:
        """The part of a jump-forward string that repeats no item."""
        data, c = forced.encode("utf-8"), self.cursor.copy()
        for i, b in enumerate(data):
            if not c.feed(b):
                return data[:i].decode("utf-8", "ignore")
        return forced

    def _restrict(self, row: torch.Tensor) -> bool:
        """Clear in the filled mask ``row`` (int32 words) every token the guard forbids; True if any was cleared."""
        c, v = self.cursor, self.vocab
        inside = any(f.unique for f in c.stack)
        if not inside and c.mode not in ("value", "after"):
            return False
        words = row.numpy()
        allowed = np.unpackbits(words.view(np.uint8), bitorder="little").astype(bool)[: len(v.quote)]
        n = len(allowed)
        if not inside:  # only a token that opens a unique array could finish two equal items in it
            pick = allowed & v.bracket[:n]
        elif not c.pending():  # no finished item yet: a repeat needs two items in one token
            pick = allowed & (v.bracket[:n] | v.comma[:n])
        elif c.mode in ("str", "esc") and c.stack[-1].unique and not c.is_key:  # the string is the item
            pick = allowed & v.quote[:n]
        elif c.mode in ("str", "esc"):  # a string inside an item: the item ends only after a ']' or '}'
            pick = allowed & v.quote_close[:n]
        elif c.mode == "num":
            pick = allowed
        else:  # whitespace alone finishes nothing here
            pick = allowed & ~v.blank[:n]
        ids = set(np.flatnonzero(pick).tolist()) | self._extending(allowed)
        self.nodes, cleared, here, memo = 0, False, c.key(), {}
        for t in ids:
            data = self.vocab.bytes[t]
            if not data:
                continue
            trial = c.copy()
            if not trial.feed_bytes(data) or (trial.prefix_of_seen() and trial.key() != here
                                              and self._dead_after(t, trial, memo)):
                w, b = divmod(t, 32)
                words[w] &= np.int32(~(1 << b) if b < 31 else 0x7FFFFFFF)
                cleared = True
        return cleared

    def _extending(self, allowed: np.ndarray) -> set:
        """Allowed tokens inside a string that keep an open item written as the start of an earlier one."""
        c = self.cursor
        if c.mode not in ("str", "esc"):
            return set()
        out = set()
        for f in c.stack:
            if f.unique and f.cur is not None:
                cur = bytes(f.cur).lstrip()
                for text in f.texts:
                    if text.startswith(cur):
                        rest = text[len(cur):]
                        out.update(i for k in range(1, len(rest) + 1) for i in self.vocab.by_text.get(rest[:k], ())
                                   if allowed[i])
        return out

    def _dead_after(self, token: int, trial: Cursor, memo: dict) -> bool:
        """Whether the search proves that after ``token`` every completion repeats an item (``memo``: by
        the state up to whitespace, within one mask)."""
        key = trial.key()
        if key in memo:
            return memo[key]
        target = next(i for i, f in enumerate(trial.stack) if f.unique and f.texts)
        frame = trial.stack[target]
        cur = bytes(frame.cur) if frame.cur is not None else b""
        near = any(t.startswith(cur) and 2 * len(cur) >= len(t) for t in frame.texts)
        if not (near or frame.loc.item(frame.count).small()) or self.nodes >= STEP_NODES:
            return False  # a large item space, the item barely begun: another item is within reach
        if not self.inner.accept([token]):
            return False
        try:
            budget = [min(SEARCH_NODES, STEP_NODES - self.nodes)]
            memo[key] = self._search(trial, target, trial.stack[target].count, budget) is False
            return memo[key]
        finally:
            self.inner.rollback(1)

    def _search(self, c: Cursor, target: int, count: int, budget: list) -> bool | None:
        """True: a completion of item ``count`` of frame ``target`` repeats nothing; False: none does;
        None: the budget ran out first. The engine state stands at ``c``'s text and is left there."""
        if len(c.stack) <= target or c.stack[target].count > count:
            return True
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        self.nodes += 1
        forced = self.inner.jump_string().encode("utf-8")
        if forced:
            return self._forced(c, forced, target, count, budget)
        self.inner.fill_mask(self.scratch, 0)
        v = self.vocab
        on = (self.scratch[0].numpy()[v.byte_words] >> v.byte_bits) & 1
        options = [int(b) for b in v.byte_values[on.astype(bool)]]
        if c.mode not in ("str", "esc") and any(b not in WS for b in options):
            options = [b for b in options if b not in WS]  # whitespace between tokens changes no value
        tried, seen_next = [], c.seen_next()
        for b in options:
            if c.plain_byte(b):  # its rank read without a copy; the copy made only if it is tried
                tried.append((True, b in seen_next, b not in CLOSERS, b, None))
                continue
            nxt = c.copy()
            if nxt.feed(b):
                done = len(nxt.stack) <= target or nxt.stack[target].count > count
                tried.append((not done, nxt.prefix_of_seen(), b not in CLOSERS, b, nxt))
        unknown = False
        for *_, b, nxt in sorted(tried, key=lambda x: x[:4]):
            if nxt is None:
                nxt = c.copy()
                nxt.feed(b)
            if not self.inner.accept([v.byte_token[b]]):
                continue
            try:
                found = self._search(nxt, target, count, budget)
            finally:
                self.inner.rollback(1)
            if found:
                return True
            unknown |= found is None
        return None if unknown else False

    def _forced(self, c: Cursor, forced: bytes, target: int, count: int, budget: list) -> bool | None:
        """:meth:`_search` past the bytes the grammar forces next (False: they repeat an item)."""
        nxt, taken = c.copy(), 0
        try:
            for b in forced:
                if not nxt.feed(b):
                    return False
                if b not in self.vocab.byte_token or not self.inner.accept([self.vocab.byte_token[b]]):
                    return None
                taken += 1
                if len(nxt.stack) <= target or nxt.stack[target].count > count:
                    return True
            return self._search(nxt, target, count, budget)
        finally:
            if taken:
                self.inner.rollback(taken)
