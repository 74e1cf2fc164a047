"""Per-row grammar controller: fill the next-token mask, apply it, accept the sampled token.

The grammar boundary: this module is the only user of a row state (:class:`.backends.RowState`, any
engine's: fill into a bitmask row, accept, can the text end here, the jump-forward string) outside
:mod:`.backends` (``tests/test_structure.py`` checks it); the decode loop sees :class:`GrammarRow`,
:class:`GrammarBatch` (one batched fill for many rows) and :func:`apply_bitmask`.

One :class:`GrammarRow` per sequence. Its mask lives in row ``index`` of a bitmask: its own
one-row buffer, or, once the batch sampler ``attach``-es it, the batch's shared ``[max_batch, V/32]``
buffer (the sampler then fills every row's mask in one batched call per engine: :class:`GrammarBatch`). The decode loop calls, each step and in this order:
``fill()`` -> (``state()`` complete/dead ends the row with no sampling) -> ``apply(logits)`` as the very last
logits processor -> sample -> ``accept(token)`` -> ``fill()`` + ``state()`` again, so a grammar
that just completed ends the row before another forward pass is spent on it.
"""

from __future__ import annotations

import torch

from .backends import Compiled, masks


class GrammarRow:
    def __init__(self, compiled: Compiled, *, vocab_size: int, stop_ids: frozenset[int]):
        self.cursor = compiled.new_state()
        self.vocab_size = vocab_size
        self.bitmask = masks.allocate(1, vocab_size)
        self.index = 0
        self._other_bits = (~_bits_for(stop_ids, self.bitmask.shape[1])).numpy()  # every id but the stops
        self.filled = False  # the bitmask holds the mask for the current grammar state
        self._state: str | None = None  # state() of the current mask, once computed
        self._on_write = None  # the shared bitmask's owner, told of every write (see ``attach``)

    def attach(self, store: torch.Tensor, index: int, on_write=None) -> None:
        """Keep the mask in row ``index`` of a shared host bitmask from now on (the current one moves along).
        ``on_write()`` is called after each write this row makes to it (the batch sampler keeps a device
        copy that it must refresh, whoever filled the row)."""
        store[index] = self.bitmask[self.index]
        self.bitmask, self.index, self._on_write = store, index, on_write

    def fill(self) -> None:
        """Compute the mask of tokens the grammar allows next (host-side, int32 bitmask); once per state."""
        if not self.filled:
            self.cursor.fill_mask(self.bitmask, self.index)
            self.filled = True
            self._state = None
            if self._on_write:
                self._on_write()

    def state(self) -> str:
        """After ``fill()``: "open" (some non-stop token allowed), "complete" (only stop tokens, or
        terminated), or "dead" (no token at all: the tokenizer cannot spell what the grammar needs).
        Computed once per mask (the batch sampler fills masks in bulk and marks ``filled``)."""
        if self._state is None:
            row = self.bitmask[self.index].numpy()
            self._state = ("complete" if self.cursor.is_terminated() else "open" if (row & self._other_bits).any()
                           else "complete" if row.any() else "dead")
        return self._state

    def apply(self, logits: torch.Tensor) -> None:
        """Set every disallowed id (padded-vocab ids included) of a 1-D logits row to -inf, in place."""
        mask = self.bitmask[self.index: self.index + 1]
        mask = mask if logits.device.type == "cpu" else mask.to(logits.device)
        masks.apply(logits.view(1, -1), mask, vocab_size=self.vocab_size)

    def mark_filled(self) -> None:
        """The mask of the current state was written into this row by a batched fill (:class:`GrammarBatch`)."""
        self.filled, self._state = True, None

    def can_end(self) -> bool:
        """Could the grammar end here (an accepting or terminated state)? Then the next mask may allow only
        stop ids; a grammar that cannot end yet cannot be complete."""
        return self.cursor.can_end()

    def jump_string(self) -> str:
        """The text the grammar forces next (empty when the next bytes are not fixed)."""
        return self.cursor.jump_string()

    def forbid(self, token: int) -> None:
        """Clear ``token`` in the filled mask (until the next ``fill``): a rejected jump-forward draft."""
        w, b = divmod(int(token), 32)
        row = self.bitmask[self.index]
        row[w] = int(row[w]) & ~(1 << b) if b < 31 else int(row[w]) & 0x7FFFFFFF
        if self._on_write:
            self._on_write()

    def accept(self, token: int) -> bool:
        ok = self.cursor.accept([int(token)])
        self.filled = False
        self._state = None
        return ok


class GrammarBatch:
    """Fills the masks of many rows that share one bitmask: one call per engine (each engine's
    :class:`.backends.MaskFiller` computes on its own threads with the GIL released)."""

    def fill(self, rows: list[GrammarRow], bitmask: torch.Tensor) -> None:
        groups: dict = {}
        for g in rows:
            groups.setdefault(g.cursor.filler, []).append(g)
        for filler, group in groups.items():
            filler.fill([g.cursor.base for g in group], bitmask, [g.index for g in group])
        for g in rows:
            g.cursor.restrict(bitmask, g.index)  # a wrapper state's rule over its engine's mask (unique arrays)
            g.mark_filled()


def apply_bitmask(logits: torch.Tensor, mask: torch.Tensor, *, vocab_size: int, indices: list[int] | None) -> None:
    """Set every id the rows' masks forbid to -inf in ``logits`` ([B, V], in place; ``indices``: only these
    rows, None: all)."""
    masks.apply(logits, mask, vocab_size=vocab_size, indices=indices)


def accepts_text(compiled: Compiled, text: str) -> bool:
    """Whether the grammar accepts the whole ``text`` and may stop right after it (suite checks, fuzzers)."""
    state = compiled.new_state()
    if not state.accept_text(text):
        return False
    return bool(state.stop_ids) and state.accept([state.stop_ids[0]])


def _bits_for(ids: frozenset[int], words: int) -> torch.Tensor:
    bits = torch.zeros(words, dtype=torch.int32)
    for i in ids:
        w, b = divmod(int(i), 32)
        if w < words:
            bits[w] |= torch.tensor(1 << b, dtype=torch.int64).to(torch.int32)
    return bits
