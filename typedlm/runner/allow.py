"""A scoring pass's allowed-attention matrix whose prompt rows are left implied.

``runner.score(ids, None, positions, allow, read, keep)`` starts with a ``keep``-token prompt that attends causally
(its contract), so a caller may give ``allow`` without those rows: ``[len(ids) - keep, len(ids)]``, the rows of the
tokens after the prompt only. A decision's fused pass does: its ~840 prompt rows would be a ~1,000 x 1,000 bool
matrix built on the host each call (~1-2 ms on this CPU), of which a later decision keeps the last few rows (the
prefix cache holds the rest). :func:`rows_from` builds just the rows a pass needs.
"""

from __future__ import annotations

import torch


def rows_from(allow: torch.Tensor, keep: int, start: int, total: int) -> torch.Tensor:
    """Rows ``start ..`` of the full ``[total, total]`` matrix: ``allow`` as given when it is full, else (the prompt's
    ``keep`` rows implied) the causal rows ``start .. keep - 1`` built here, then ``allow``."""
    if allow.shape[0] == total:
        return allow[start:]
    if allow.shape[0] != total - keep:
        raise ValueError(f"allow has {allow.shape[0]} rows: {total} (all) or {total - keep} (after the prompt)")
    if start >= keep:
        return allow[start - keep:]
    causal = torch.arange(total)[None, :] <= torch.arange(start, keep)[:, None]
    return torch.cat([causal, allow])
