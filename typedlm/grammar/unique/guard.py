"""The per-row guard: masks the tokens that would finish an item equal to an earlier item of its unique
array, and the tokens after which every completion of the open items repeats one (:mod:`.lookahead`).

:class:`GuardedCompiled` wraps a backend's compiled grammar; its :class:`GuardedState` wraps the engine's
row state (a :class:`..backends.RowState` itself): masks are narrowed after each fill (``fill_mask``, or
``restrict`` after a batched fill of ``base``), ``accept`` feeds the cursor, the jump-forward string is cut
before a repeat. The grammar stays context-free; the guard reads the emitted text with a
:class:`.cursor.Cursor`, and the mask through the token classes of :class:`.vocab.Vocab`.

- **Sound**: each allowed token that could finish an item (outside a string: any; inside one: those
  with a quote) is read on a copy of the cursor; one that finishes a repeated item is masked.
- **Live**: where a token leaves an open item written as the first half or more of an earlier one (of a
  small item space, ``Loc.small``: any start, or a new item not begun), the look-ahead searches for a
  completion of the outermost such item that repeats nothing; the token is masked only when the search
  proves there is none (a finite item space used up: an enum of N values with ``minItems`` N completes).
  A search past its budget leaves the token allowed.
"""

from __future__ import annotations

import numpy as np
import torch

from .cursor import Cursor
from .lookahead import Lookahead
from .plan import Plan
from .vocab import Vocab


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
        self.ahead = Lookahead(inner, self.vocab)

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
        self.ahead.advance(b"".join(data))
        return all(self.cursor.feed_bytes(d) for d in data)

    def accept_text(self, text: str) -> bool:
        data = text.encode("utf-8")
        if not self.inner.accept_text(text):
            return False
        self.prefix, self.tokens = self.prefix + b"".join(self.tokens) + data, []
        self.ahead.advance(data)
        return self.cursor.feed_bytes(data)

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` tokens accepted by :meth:`accept` (the cursor re-reads what is left)."""
        if n > len(self.tokens):
            raise ValueError(f"cannot roll back {n} tokens: {len(self.tokens)} accepted since the last accept_text")
        self.inner.rollback(n)
        del self.tokens[len(self.tokens) - n:]
        self.cursor = Cursor(self.plan.root)
        self.cursor.feed_bytes(self.prefix + b"".join(self.tokens))
        self.ahead.forget()

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

    def _candidates(self, words: np.ndarray) -> list[int]:
        """The allowed tokens that could finish an item (a superset), from the token classes."""
        c, v = self.cursor, self.vocab
        in_str = c.mode in ("str", "esc")
        if not any(f.unique for f in c.stack):  # only a token that opens a unique array could finish two items in it
            return v.ids(words & v.bracket)
        if not c.pending():  # no finished item yet: a repeat needs two items in one token
            return v.ids(words & (v.quote_open if in_str else v.bracket_comma))
        if in_str and c.stack[-1].unique and not c.is_key:  # the string is the item
            return v.ids(words & v.quote)
        if in_str:  # a string inside an item: the item ends only after a ']' or '}'
            return v.ids(words & v.quote_close)
        if c.mode == "num":  # more digits end nothing
            return v.ids(words & ~v.digits)
        return v.ids(words & ~v.blank)  # whitespace alone finishes nothing here

    def _restrict(self, row: torch.Tensor) -> bool:
        """Clear in the filled mask ``row`` (int32 words) every token the guard forbids; True if any was cleared."""
        c, v = self.cursor, self.vocab
        if not any(f.unique for f in c.stack) and c.mode not in ("value", "after"):
            return False
        words = row.numpy()
        ids = set(self._candidates(words)) | self._extending(words)
        ahead = self.ahead
        ahead.nodes, cleared, here, memo = 0, False, c.key(), {}
        for t in sorted(ids, key=lambda t: -len(v.bytes[t])):  # a longer token's witness covers its prefixes
            data = v.bytes[t]
            if not data or ahead.covered(data):
                continue
            trial = c.copy()
            if not trial.feed_bytes(data) or (trial.prefix_of_seen() and trial.key() != here
                                              and ahead.dead_after(t, data, trial, memo)):
                w, b = divmod(t, 32)
                words[w] &= np.int32(~(1 << b) if b < 31 else 0x7FFFFFFF)
                cleared = True
        return cleared

    def _extending(self, words: np.ndarray) -> set:
        """Allowed tokens that keep an open item written as the start of an earlier one: inside a string, or
        more digits of a number (the others are candidates already)."""
        c = self.cursor
        if c.mode not in ("str", "esc", "num"):
            return set()
        out = set()
        for f in c.stack:
            if f.unique and f.cur is not None:
                cur = bytes(f.cur).lstrip()
                for text in f.texts:
                    if text.startswith(cur):
                        out |= self.vocab.prefixes(text[len(cur):], words)
        return out
