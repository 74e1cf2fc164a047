"""The graphed decision pass's RoPE kernel (runner/triton_rope.py), run on the CPU by Triton's interpreter: the same
bits as the eager ops ``x * cos + rotate_half(x) * sin`` in float32 and float16 (each op rounded like torch's; the
interpreter's bfloat16 is not faithful: bf16 on the H200 by ``bench/score_graph_check.py``)."""

import os

import pytest
import torch

from typedlm.runner.layers import rotate_half

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def rope():
    if os.environ.get("TRITON_INTERPRET") != "1":  # tests/conftest.py sets it before triton is imported
        pytest.skip("needs Triton's interpreter (TRITON_INTERPRET=1)")
    from typedlm.runner import triton_rope

    return triton_rope.rope


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rope_kernel_equals_the_torch_ops_bit_for_bit(rope, dtype):
    g = torch.Generator().manual_seed(3)
    n, heads, kv_heads, d = 9, 6, 2, 32
    qkv = (torch.randn(n, (heads + 2 * kv_heads) * d, generator=g) * 3).to(dtype)  # a fused q/k/v GEMM's output
    q, k, _v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
    q, k = q.view(n, heads, d), k.view(n, kv_heads, d)  # strided views, as qkv_rope has them
    ang = torch.arange(n)[:, None] * (1e4 ** (-torch.arange(d // 2) / (d // 2)))[None]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    got_q, got_k = rope(q, k, cos, sin)
    c, s = cos.view(n, 1, d), sin.view(n, 1, d)
    want_q, want_k = q * c + rotate_half(q) * s, k * c + rotate_half(k) * s
    assert got_q.dtype == dtype and got_q.shape == want_q.shape and got_k.shape == want_k.shape
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
    if dtype == torch.float16:  # the roundings matter: one rounding at the end only would differ somewhere
        fused = ((q.float() * c.float()) + (rotate_half(q).float() * s.float())).to(dtype)
        assert not torch.equal(fused, want_q)


def test_qkv_rope_with_the_kernel_equals_its_torch_ops(rope):
    from typedlm.runner.invariant import ops
    from typedlm.runner.layers import qkv_rope

    g = torch.Generator().manual_seed(4)
    n, hidden, heads, kv_heads, d = 7, 64, 4, 2, 16
    h = torch.randn(1, n, hidden, generator=g)
    w, b = torch.randn((heads + 2 * kv_heads) * d, hidden, generator=g) * 0.1, torch.randn((heads + 2 * kv_heads) * d,
                                                                                          generator=g)
    ang = torch.arange(n)[:, None] * (1e4 ** (-torch.arange(d // 2) / (d // 2)))[None]
    emb = torch.cat([ang, ang], -1)[None]  # [1, n, d] as the rotary module gives it
    args = (h, torch.ones(hidden), w, b, None, None, emb.cos(), emb.sin(), 1e-6, heads, kv_heads, d)
    want = qkv_rope(*args, linear=ops.linear, norm=ops.rms_norm)
    got = qkv_rope(*args, linear=ops.linear, norm=ops.rms_norm, rope=rope)
    assert all(torch.equal(x, y) for x, y in zip(got, want))
