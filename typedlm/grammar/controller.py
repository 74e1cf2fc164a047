"""Per-row grammar controller: fill the next-token mask, apply it, accept the sampled token.

One :class:`GrammarRow` per sequence. The decode loop calls, each step and in this order:
``fill()`` -> (``state()`` complete/dead ends the row with no sampling) -> ``apply(logits)`` as the very last
logits processor -> sample -> ``accept(token)`` -> ``fill()`` + ``state()`` again, so a grammar
that just completed ends the row before another forward pass is spent on it.
"""

from __future__ import annotations

import torch
import xgrammar as xgr


class GrammarRow:
    def __init__(self, compiled: xgr.CompiledGrammar, *, vocab_size: int, stop_ids: frozenset[int]):
        self.matcher = xgr.GrammarMatcher(compiled)
        self.vocab_size = vocab_size
        self.bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._stop_bits = _bits_for(stop_ids, self.bitmask.shape[1])
        self.filled = False  # the bitmask holds the mask for the current matcher state

    def fill(self) -> None:
        """Compute the mask of tokens the grammar allows next (host-side, int32 bitmask); once per state."""
        if not self.filled:
            self.matcher.fill_next_token_bitmask(self.bitmask, 0)
            self.filled = True

    def state(self) -> str:
        """After ``fill()``: "open" (some non-stop token allowed), "complete" (only stop tokens, or
        terminated), or "dead" (no token at all: the tokenizer cannot spell what the grammar needs)."""
        if self.matcher.is_terminated():
            return "complete"
        row = self.bitmask[0]
        if bool(torch.any(row & ~self._stop_bits)):
            return "open"
        return "complete" if bool(torch.any(row)) else "dead"

    def apply(self, logits: torch.Tensor) -> None:
        """Set every disallowed id (padded-vocab ids included) of a 1-D logits row to -inf, in place."""
        mask = self.bitmask if logits.device.type == "cpu" else self.bitmask.to(logits.device, non_blocking=True)
        xgr.apply_token_bitmask_inplace(logits.view(1, -1), mask, vocab_size=self.vocab_size)

    def accept(self, token: int) -> bool:
        ok = self.matcher.accept_token(int(token))
        self.filled = False
        return ok


def _bits_for(ids: frozenset[int], words: int) -> torch.Tensor:
    bits = torch.zeros(words, dtype=torch.int32)
    for i in ids:
        w, b = divmod(int(i), 32)
        if w < words:
            bits[w] |= torch.tensor(1 << b, dtype=torch.int64).to(torch.int32)
    return bits
