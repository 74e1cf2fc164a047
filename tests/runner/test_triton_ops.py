"""The batch-invariant Triton GEMM and RMSNorm (issue 20), run on the CPU by Triton's interpreter in float16
(the interpreter's bfloat16 is not faithful; bf16 on CUDA: ``bench/gpu_check.py ARCH invariance``): they equal
torch within rounding, and every row has the same bits alone, in batches of any size, at any position."""

import os

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def tops():
    if os.environ.get("TRITON_INTERPRET") != "1":  # tests/conftest.py sets it before triton is imported
        pytest.skip("needs Triton's interpreter (TRITON_INTERPRET=1)")
    from typedlm.runner.invariant import triton_ops

    return triton_ops


def _rows_alone_equal(fn, x, sizes=(1, 7, 130)):
    alone = torch.cat([fn(x[i:i + 1]) for i in range(0, x.shape[0], 13)])
    for n in sizes:
        assert torch.equal(fn(x[:n])[::13], alone[: -(-n // 13)]), n
    perm = torch.randperm(x.shape[0])
    assert torch.equal(fn(x[perm])[torch.argsort(perm)][::13], alone)
    return alone


def test_triton_linear_is_invariant_and_equals_torch(tops):
    torch.manual_seed(0)
    x, w, b = torch.randn(130, 96).half(), (torch.randn(200, 96) * 0.1).half(), torch.randn(200).half()
    _rows_alone_equal(lambda t: tops.linear(t, w, b), x)
    torch.testing.assert_close(tops.linear(x, w, b).float(), F.linear(x.float(), w.float(), b.float()),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("cfg", [{"SPLIT": 3, "BK": 32, "BM": 32, "BN": 32}, {"SPLIT": 2, "BK": 64}])
def test_split_k_is_invariant_and_equals_torch(tops, cfg):
    torch.manual_seed(2)
    x, w = torch.randn(130, 160).half(), (torch.randn(72, 160) * 0.1).half()
    tops.SHAPE_CONFIGS[(72, 160)] = cfg  # a fixed split of K for this weight shape
    try:
        alone = _rows_alone_equal(lambda t: tops.linear(t, w), x)
        split = tops.linear(x, w)
    finally:
        del tops.SHAPE_CONFIGS[(72, 160)]
    assert torch.equal(split[::13], alone)
    torch.testing.assert_close(split.float(), F.linear(x.float(), w.float()), rtol=1e-2, atol=1e-2)


def test_triton_rms_norm_is_invariant_and_equals_torch(tops):
    torch.manual_seed(1)
    x, g = torch.randn(130, 96).half(), torch.randn(96).half()
    _rows_alone_equal(lambda t: tops.rms_norm(t, g, 1e-6), x)
    xf = x.float()
    ref = g * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).half()
    torch.testing.assert_close(tops.rms_norm(x, g, 1e-6), ref, rtol=1e-3, atol=1e-3)


def test_reduction_settings_never_depend_on_the_row_count():
    """Every measured table entry (gemm_configs.json, each device) picks one BK and one SPLIT for all row counts,
    whatever tiles its row buckets choose."""
    import json

    from typedlm.runner.invariant import triton_ops

    names = json.loads(triton_ops.TABLE.read_text())
    assert names
    for name in names:
        for shape, entry in triton_ops.table(name).items():
            fixed = {(c["BK"], c["SPLIT"]) for c in (triton_ops.by_rows(entry, m) for m in range(1, 8193))}
            assert len(fixed) == 1, (name, shape, fixed)


@pytest.mark.parametrize("rows", [
    [[64, {"BM": 32, "BK": 32}], [None, {"BM": 64}]],  # a reduction setting inside a row bucket
    [[64, {"BM": 32}], [16, {"BM": 16}], [None, {"BM": 64}]],  # bounds not rising
    [[64, {"BM": 32}]],  # no bucket for any M
])
def test_table_entries_that_could_break_invariance_are_refused(rows):
    from typedlm.runner.invariant import triton_ops

    with pytest.raises(ValueError, match="gemm_configs.json"):
        triton_ops._buckets({"BK": 64, "SPLIT": 1, "rows": rows})


def test_tiles_by_row_bucket_keep_rows_invariant(tops, tmp_path, monkeypatch):
    """A table whose row buckets choose different tiles (BM 16 / 32 / 64, BN 32 / 64) under one BK: every row has
    the same bits alone and in batches that fall in other buckets."""
    import json

    torch.manual_seed(3)
    x, w = torch.randn(130, 160).half(), (torch.randn(72, 160) * 0.1).half()
    rows = [[1, {"BM": 16, "BN": 32}], [8, {"BM": 32, "BN": 64, "GROUP": 2}], [None, {"BM": 64, "BN": 32}]]
    table = tmp_path / "gemm_configs.json"
    table.write_text(json.dumps({"": {"72x160": {"BK": 32, "SPLIT": 1, "rows": rows}}}))
    monkeypatch.setattr(tops, "TABLE", table)
    tops._table.cache_clear()
    try:
        assert [tops.config(72, 160, m, x.device)["BM"] for m in (1, 2, 8, 9, 130)] == [16, 32, 32, 64, 64]
        _rows_alone_equal(lambda t: tops.linear(t, w), x)
        torch.testing.assert_close(tops.linear(x, w).float(), F.linear(x.float(), w.float()), rtol=1e-2, atol=1e-2)
    finally:
        tops._table.cache_clear()
