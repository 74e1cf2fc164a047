"""The token bitmask every engine fills: ``[rows, ceil(V/32)]`` int32, bit ``t % 32`` of word ``t // 32``
set when token ``t`` is allowed; allocated and applied to logits with xgrammar's kernels (torch on CPU
and CUDA; MLX through :func:`apply_mlx`)."""

from __future__ import annotations

import torch
import xgrammar as xgr


def allocate(rows: int, vocab_size: int) -> torch.Tensor:
    """A host bitmask of ``rows`` rows with every token allowed."""
    return xgr.allocate_token_bitmask(rows, vocab_size)


def apply(logits: torch.Tensor, mask: torch.Tensor, *, vocab_size: int, indices: list[int] | None = None) -> None:
    """Set every id the rows' masks forbid to -inf in ``logits`` ([B, V] or [V], in place; ``indices``: only
    these rows, None: all), with xgrammar's kernel for the device."""
    xgr.apply_token_bitmask_inplace(logits, mask, vocab_size=vocab_size, indices=indices)


def apply_mlx(mask, logits, vocab_size: int):
    """``logits`` (an MLX array [B, V]) with the ids ``mask`` (MLX int32 [B, V/32]) forbids at -inf."""
    # MLX is an optional extra: imported where an MLX engine asks for it
    from xgrammar.kernels.apply_token_bitmask_mlx import apply_token_bitmask_mlx

    return apply_token_bitmask_mlx(mask, logits, vocab_size)
