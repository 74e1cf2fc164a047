"""runner/allow.py: a pass's allowed-attention rows with the prompt's causal rows left implied."""

import pytest
import torch

from typedlm.runner.allow import rows_from


def _full(keep: int, total: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(total)
    allow = torch.rand(total, total, generator=g) < 0.5
    allow[:keep] = torch.ones(keep, total).tril().bool()
    return allow


@pytest.mark.parametrize("start", [0, 5, 16, 20, 23])
def test_rows_from_builds_the_implied_prompt_rows(start):
    keep, total = 20, 30
    full = _full(keep, total)
    assert torch.equal(rows_from(full, keep, start, total), full[start:])  # a full matrix: sliced
    assert torch.equal(rows_from(full[keep:], keep, start, total), full[start:])  # the prompt rows built


def test_rows_from_refuses_a_matrix_of_neither_shape():
    with pytest.raises(ValueError, match="rows"):
        rows_from(torch.ones(7, 30, dtype=torch.bool), 20, 0, 30)
