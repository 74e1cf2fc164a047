"""The guard's look-ahead: whether, after a token that leaves an open item written as the start of an
earlier one, some completion of that item repeats nothing (a depth-first search over single-byte tokens on
the row's own engine state: accept, then roll back).

A search that finds such a completion keeps it as a *witness*: the bytes from the row's current end
through the item's end. Any later token whose bytes begin a witness is live without a search (the rest of
the witness completes the item, the grammar accepts it, no repeat on the way), and a witness outlives the
mask it was found for: when the row accepts a token that begins it, the rest is still one. The search
follows the earlier item's text as far as it can, so a row that writes an earlier item again stays on
the witness up to the byte where it must differ: one search per such item, not one per token.
A search past its budget proves nothing: the token stays allowed.
"""

from __future__ import annotations

from itertools import chain

import torch

from .cursor import Cursor

SEARCH_NODES = 48  # steps (a byte, or the grammar's forced bytes) one look-ahead search may take
STEP_NODES = 128  # look-ahead steps one mask may spend in all
CLOSERS = frozenset(b'"]}')


class Lookahead:
    """One row's look-ahead over its engine state ``inner`` (a :class:`..backends.RowState`)."""

    def __init__(self, inner, vocab):
        self.inner, self.vocab = inner, vocab
        self.scratch = torch.zeros(1, (vocab.size + 31) // 32, dtype=torch.int32)
        self.nodes = 0
        self.witnesses: list[bytes] = []  # completions of the open item from the row's end, repeating nothing

    def advance(self, data: bytes) -> None:
        """The row accepted ``data``: the witnesses it begins go on, less it; the others are dropped."""
        n = len(data)
        self.witnesses = [w[n:] for w in self.witnesses if len(w) > n and w.startswith(data)]

    def forget(self) -> None:
        self.witnesses = []

    def covered(self, data: bytes) -> bool:
        """Whether ``data`` begins a witness (then it repeats nothing and stays live)."""
        return any(w.startswith(data) for w in self.witnesses)

    def dead_after(self, token: int, data: bytes, trial: Cursor, memo: dict) -> bool:
        """Whether the search proves that after ``token`` (its bytes ``data``, read into ``trial``) every
        completion repeats an item (``memo``: by the state up to whitespace, within one mask)."""
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
            found = self._search(trial, target, frame.count, [min(SEARCH_NODES, STEP_NODES - self.nodes)])
        finally:
            self.inner.rollback(1)
        if isinstance(found, bytes):
            self.witnesses.append(data + found)
        memo[key] = found is False
        return memo[key]

    def _search(self, c: Cursor, target: int, count: int, budget: list):
        """The bytes of a completion of item ``count`` of frame ``target`` that repeats nothing; False: none
        does; None: the budget ran out first. The engine state stands at ``c``'s text and is left there."""
        if len(c.stack) <= target or c.stack[target].count > count:
            return b""
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        self.nodes += 1
        forced = self.inner.jump_string().encode("utf-8")
        if forced:
            return self._forced(c, forced, target, count, budget)
        self.inner.fill_mask(self.scratch, 0)
        # whitespace between tokens changes no value: tried only where nothing else may follow
        options = self.vocab.bytes_allowed(self.scratch[0].numpy(), solid=c.mode not in ("str", "esc"))
        # the bytes of an earlier item's text first, then closers (they may end the item), then the rest: the
        # witness found follows the earlier item as far as it can (a row writing it again stays on the
        # witness up to where it must differ); ranked lazily (the first tries mostly decide). Only bytes the
        # mask allows are tried: llguidance's matcher does not survive a refused token.
        follow = c.seen_next()
        ranked = chain(sorted(b for b in options if b in follow),
                       (b for b in options if b in CLOSERS and b not in follow),
                       (b for b in options if b not in CLOSERS and b not in follow))
        unknown = False
        for b in ranked:
            nxt = c.copy()
            if not nxt.feed(b) or not self.inner.accept([self.vocab.byte_token[b]]):
                continue
            try:
                found = self._search(nxt, target, count, budget)
            finally:
                self.inner.rollback(1)
            if isinstance(found, bytes):
                return bytes([b]) + found
            unknown |= found is None
            if budget[0] <= 0:
                return None
        return None if unknown else False

    def _forced(self, c: Cursor, forced: bytes, target: int, count: int, budget: list):
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
                    return forced[:taken]
            found = self._search(nxt, target, count, budget)
            return forced + found if isinstance(found, bytes) else found
        finally:
            if taken:
                self.inner.rollback(taken)
