"""The fused Triton attention of the batch-invariant mode (issue 20), run on the CPU by Triton's interpreter:
it equals the torch reference (:mod:`typedlm.runner.invariant.attention`) within rounding, and a query's
output has the same bits whatever else shares the pass (other queries, other batch rows, keys scattered
among masked ones or split between a prefix and the pass). The CUDA run of the same checks is
``bench/gpu_check.py ARCH invariance``."""

import os

import pytest
import torch

pytest.importorskip("triton")

from typedlm.runner.invariant import attention as ref  # noqa: E402


@pytest.fixture(scope="module")
def ta():
    if os.environ.get("TRITON_INTERPRET") != "1":  # tests/conftest.py sets it before triton is imported
        pytest.skip("needs Triton's interpreter (TRITON_INTERPRET=1)")
    from typedlm.runner.invariant import triton_attention

    return triton_attention


def _inputs(b=2, H=6, kvh=2, q=20, k=70, d=16, seed=0):
    torch.manual_seed(seed)
    return torch.randn(b, H, q, d), torch.randn(b, kvh, k, d), torch.randn(b, kvh, k, d)


@pytest.mark.parametrize("kind,d", [("causal", 16), ("bool", 16), ("additive", 16), ("causal", 24)])
def test_triton_attention_equals_the_torch_reference(ta, kind, d):
    Q, K, V = _inputs(d=d)  # 24: a head size padded to 32 inside the kernel
    allow = torch.rand(2, 20, 70) < 0.3
    allow[..., 0] = True
    mask = {"causal": None, "bool": allow[:, None],
            "additive": torch.zeros(2, 1, 20, 70).masked_fill(~allow[:, None], torch.finfo(torch.float32).min)}[kind]
    torch.testing.assert_close(ta.attention(Q, K, V, mask, 0.25), ref.attention(Q, K, V, mask, 0.25),
                               rtol=1e-5, atol=1e-5)


def test_triton_attention_is_invariant_to_what_shares_the_pass(ta):
    """One query over its 90 keys (two key blocks and a part) alone; the same query among other queries and
    batch rows, its keys scattered among masked ones in a longer sequence; and as the last query of a causal
    pass whose first keys come from a prefix: the same bits."""
    H, kvh, d, n = 4, 2, 16, 90
    torch.manual_seed(3)
    keys, vals, q = torch.randn(1, kvh, n, d), torch.randn(1, kvh, n, d), torch.randn(1, H, 1, d)
    alone = ta.attention(q, keys, vals, None, 0.25)
    K = 200
    spots = torch.sort(torch.randperm(K)[:n]).values
    big_k, big_v = torch.randn(3, kvh, K, d), torch.randn(3, kvh, K, d)
    big_k[1][:, spots], big_v[1][:, spots] = keys[0], vals[0]
    allow = torch.rand(3, 5, K) < 0.5
    allow[1, 2] = False
    allow[1, 2, spots] = True
    qs = torch.randn(3, H, 5, d)
    qs[1, :, 2] = q[0, :, 0]
    assert torch.equal(ta.attention(qs, big_k, big_v, allow[:, None], 0.25)[1, 2], alone[0, 0])
    qc = torch.randn(1, H, 7, d)  # a causal pass of 7 queries after an 83-key prefix: the last sees all 90
    qc[:, :, -1] = q[:, :, 0]
    with torch.inference_mode():  # as the runner calls it
        assert torch.equal(ta.attention(qc, keys, vals, None, 0.25)[0, -1], alone[0, 0])
        assert torch.equal(ta.attention(qs, big_k, big_v, allow[:, None], 0.25)[1, 2], alone[0, 0])


def test_triton_attention_broadcast_mask(ta):
    """A mask with batch and query dimensions of 1 (shared by every row / query) is broadcast."""
    Q, K, V = _inputs(b=2, q=5)
    allow = torch.rand(1, 1, 1, 70) < 0.5
    allow[..., 0] = True
    torch.testing.assert_close(ta.attention(Q, K, V, allow, 0.25), ref.attention(Q, K, V, allow, 0.25),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("q,k,g", [(40, 40, 3), (150, 230, 7), (300, 300, 1)])
def test_causal_query_tiles_give_each_query_its_own_bits(ta, q, k, g):
    """A causal pass runs query tiles (several queries' rows share each key block's loads; blocks past a row's
    last key are read for later queries): every query has the bits of the one-query-a-program kernel under the
    same causal mask given explicitly (a decide pass's path) and of itself alone on its own keys."""
    kvh, d = 2, 16
    torch.manual_seed(4)
    Q, K, V = torch.randn(1, kvh * g, q, d), torch.randn(1, kvh, k, d), torch.randn(1, kvh, k, d)
    tiled = ta.attention(Q, K, V, None, 0.25)
    allow = torch.ones(q, k, dtype=torch.bool).tril_(k - q)[None, None]
    assert torch.equal(tiled, ta.attention(Q, K, V, allow, 0.25))
    for i in (0, q // 2, q - 1):
        n = k - q + i + 1
        alone = ta.attention(Q[:, :, i:i + 1], K[:, :, :n], V[:, :, :n], None, 0.25)
        assert torch.equal(tiled[:, i], alone[:, 0]), i
    torch.testing.assert_close(tiled, ref.attention(Q, K, V, None, 0.25), rtol=1e-5, atol=1e-5)
