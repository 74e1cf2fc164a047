"""Sampling primitives: exact draws, truncation, repetition penalty, parameter validation."""

import pytest
import torch

from typedlm.errors import ConstraintError
from typedlm.generate.sampling import SamplingParams, apply_repetition_penalty, sample, truncate


def test_sample_draws_from_the_softmax():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    g = torch.Generator().manual_seed(0)
    p = SamplingParams(temperature=1.0)
    counts = torch.bincount(torch.tensor([sample(logits.clone(), p, g) for _ in range(4000)]), minlength=4)
    freq = counts.float() / counts.sum()
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.03), freq


def test_sample_never_picks_minus_inf():
    logits = torch.tensor([0.0, float("-inf"), 0.0, float("-inf")])
    g = torch.Generator().manual_seed(1)
    picks = {sample(logits.clone(), SamplingParams(), g) for _ in range(500)}
    assert picks == {0, 2}


def test_greedy_is_argmax():
    assert sample(torch.tensor([0.1, 3.0, 2.0]), SamplingParams(temperature=0), None) == 1


def test_top_k_and_top_p():
    x = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1]))
    k = x.clone()
    truncate(k, 2, 1.0)
    assert torch.isinf(k[2:]).all() and torch.isfinite(k[:2]).all()
    p = x.clone()
    truncate(p, 0, 0.65)  # 0.4 + 0.3 reaches 0.65: keep two
    assert torch.isfinite(p[:2]).all() and torch.isinf(p[2:]).all()
    p = x.clone()
    truncate(p, 0, 0.3)  # the top token alone reaches 0.3
    assert torch.isfinite(p[0]) and torch.isinf(p[1:]).all()


def test_repetition_penalty_pushes_seen_tokens_down():
    x = torch.tensor([2.0, -2.0, 1.0])
    apply_repetition_penalty(x, [0, 1], 2.0)
    assert x.tolist() == [1.0, -4.0, 1.0]


def test_stop_normalization_and_validation():
    assert SamplingParams(stop="x").stop == ("x",)
    with pytest.raises(ConstraintError, match="top_p"):
        SamplingParams(top_p=1.5)
    with pytest.raises(ConstraintError, match="seed"):
        SamplingParams(seed="abc")
