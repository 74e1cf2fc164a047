"""The batched sampling stage: equal to the per-row reference pipeline (tests/support/reference_loop.py),
exact draws, truncation, repetition penalty, parameter validation."""

import pytest
import torch

from typedlm.errors import ConstraintError
from typedlm.generate.sampler import BatchSampler
from typedlm.generate.sampling import SamplingParams
from typedlm.generate.sequence import Sequence

from tests.support.reference_loop import select

V, TOK_V = 300, 290  # a padded vocabulary: ids >= TOK_V never decode


def _seq(params, prompt=(1, 2, 3)):
    gen = torch.Generator().manual_seed(params.seed) if params.seed is not None and not params.greedy else None
    return Sequence(prompt_ids=list(prompt), params=params, tokenizer_vocab_size=TOK_V, stop_ids=frozenset({0}),
                    generator=gen)


def _batched(params_list, logits, slots=None, steps=1):
    sampler = BatchSampler(max_batch=9, vocab_size=V, tokenizer_vocab_size=TOK_V, device=torch.device("cpu"))
    seqs = [_seq(p, prompt=(5 + i, 7, 11)) for i, p in enumerate(params_list)]
    slots = slots or list(range(len(seqs)))
    for s, seq in zip(slots, seqs):
        sampler.admit(s, seq)
    out = []
    for step in range(steps):
        toks = sampler.finish(sampler.sample(logits[step].clone(), seqs, slots), seqs)
        for seq, t in zip(seqs, toks):
            seq.output_ids.append(t)
        out.append(toks)
    return out


PARAMS = [SamplingParams(temperature=0), SamplingParams(temperature=0.7, seed=1),
          SamplingParams(temperature=1.3, top_k=5, seed=2), SamplingParams(top_p=0.6, seed=3),
          SamplingParams(temperature=0, repetition_penalty=1.8), SamplingParams(top_k=40, top_p=0.9, seed=4,
                                                                                 repetition_penalty=0.7),
          SamplingParams(temperature=0, top_k=3),
          SamplingParams(temperature=0, logit_bias={7: 8.0, 20: -100.0, 21: 50.0}),
          SamplingParams(temperature=0.8, top_k=10, seed=5, logit_bias={3: 3.0, 4: 3.0}, repetition_penalty=1.3)]


@pytest.mark.parametrize("slots", [None, [6, 0, 3, 1, 7, 2, 5, 8, 4]])
def test_batched_pipeline_equals_per_row_reference(slots):
    """Greedy rows token for token, seeded rows draw what they draw alone, over 12 steps (the
    penalty sees the growing output), whatever slots the rows sit in."""
    torch.manual_seed(0)
    logits = torch.randn(12, len(PARAMS), V) * 3
    got = _batched(PARAMS, logits, slots, steps=12)
    for i, p in enumerate(PARAMS):
        ref = _seq(p, prompt=(5 + i, 7, 11))
        want = []
        for step in range(12):
            t = select(ref, logits[step, i].clone())
            ref.output_ids.append(t)
            want.append(t)
        assert [g[i] for g in got] == want, (i, p)
    assert all(t < TOK_V for g in got for t in g)


def test_sample_draws_from_the_softmax():
    base = torch.full((V,), float("-inf"))
    base[:4] = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    sampler = BatchSampler(max_batch=1, vocab_size=V, tokenizer_vocab_size=TOK_V, device=torch.device("cpu"))
    seq = _seq(SamplingParams(seed=0))
    sampler.admit(0, seq)
    picks = torch.tensor([sampler.finish(sampler.sample(base.clone()[None], [seq], [0]), [seq])[0]
                          for _ in range(3000)])
    freq = torch.bincount(picks, minlength=4).float() / len(picks)
    assert torch.allclose(freq[:4], torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.03), freq


def test_truncation_per_row():
    x = torch.full((V,), -30.0)
    x[:4] = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1]))
    sampler = BatchSampler(max_batch=3, vocab_size=V, tokenizer_vocab_size=TOK_V, device=torch.device("cpu"))
    rows = [SamplingParams(top_k=2), SamplingParams(top_p=0.65), SamplingParams(top_p=0.3)]
    for i, p in enumerate(rows):
        sampler.admit(i, _seq(p))
    work = x.repeat(3, 1)
    sampler._truncate(work, torch.arange(3))
    kept = [set(torch.isfinite(r).nonzero().flatten().tolist()) for r in work]
    assert kept == [{0, 1}, {0, 1}, {0}]  # top-2; 0.4 + 0.3 reaches 0.65; the top token alone reaches 0.3


def test_repetition_penalty_pushes_seen_tokens_down():
    x = torch.zeros(1, V)
    x[0, :3] = torch.tensor([2.0, -2.0, 1.0])
    x[0, 3:] = -50.0
    sampler = BatchSampler(max_batch=1, vocab_size=V, tokenizer_vocab_size=TOK_V, device=torch.device("cpu"))
    seq = _seq(SamplingParams(temperature=0, repetition_penalty=2.0), prompt=(0, 1))
    sampler.admit(0, seq)
    work = x.clone()
    sampler.sample(work, [seq], [0])
    assert work[0, :3].tolist() == [1.0, -4.0, 1.0]


def test_stop_normalization_and_validation():
    assert SamplingParams(stop="x").stop == ("x",)
    with pytest.raises(ConstraintError, match="top_p"):
        SamplingParams(top_p=1.5)
    with pytest.raises(ConstraintError, match="seed"):
        SamplingParams(seed="abc")


def test_forced_tokens_count_as_seen_for_the_repetition_penalty():
    """Tokens a row appends without sampling (jump-forward, reasoning end) are penalized like sampled
    ones: the batched pipeline equals the reference over the same output (fails without ``saw``)."""
    logits = torch.zeros(V)
    logits[9], logits[10] = 5.0, 4.0
    p = SamplingParams(temperature=0, repetition_penalty=2.0)
    sampler = BatchSampler(max_batch=2, vocab_size=V, tokenizer_vocab_size=TOK_V, device=torch.device("cpu"))
    seq = _seq(p)
    sampler.admit(1, seq)
    seq.output_ids.append(9)
    sampler.saw(1, seq, [9])
    got = sampler.finish(sampler.sample(logits.clone()[None], [seq], [1]), [seq])[0]
    assert got == 10
    ref = _seq(p)
    ref.output_ids.append(9)
    assert got == select(ref, logits.clone())
