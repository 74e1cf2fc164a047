"""``typedlm bench roofline``: the FLOP/byte arithmetic against a hand-computed config, and a run on the tiny model."""

import json

import pytest
import torch
from transformers import LlamaConfig
from typer.testing import CliRunner

from typedlm.bench.cost import Shape, causal_keys, peaks, rates
from typedlm.bench.roofline import Meter, counted_forwards, decision_work, union_s
from typedlm.cli import app
from typedlm.testing.archs import ARCHS

SMALL = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=128, vocab_size=100)


def test_shape_counts_a_hand_computed_config():
    s = Shape.of(SMALL, 100, torch.float32)
    # head_dim 16: q 64x64, k and v 64x32 each, o 64x64, gate/up/down 3 x 64x128
    assert s.layer_params == 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 == 36864
    assert s.lm_params == 6400
    assert s.weight_bytes == (2 * 36864 + 6400) * 4 == 320512
    assert s.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4 == 512  # layers x (K, V) x kv_heads x head_dim x fp32
    # 10 tokens, the lm_head on 1, 55 (query, key) pairs: 2 x params x tokens + 4 x layers x heads x head_dim x pairs
    assert s.flops(10, 1, 55) == 2 * (73728 * 10 + 6400) + 4 * 2 * 4 * 16 * 55 == 1515520
    assert s.bytes(3, 100, 10) == 3 * 320512 + 110 * 512


def test_qwen_7b_shape():
    cfg = LlamaConfig(**{k: v for k, v in ARCHS["qwen2.5-7b"].items() if k != "model_type"})
    s = Shape.of(cfg, 152064, torch.bfloat16)
    assert s.head_dim == 128 and s.dtype_bytes == 2
    assert s.flops(1, 1, 0) == 2 * (28 * 233_046_016 + 3584 * 152064)  # ~14.1 GFLOP a token before attention
    assert s.kv_bytes_per_token == 28 * 2 * 4 * 128 * 2


def test_causal_keys_and_union():
    assert causal_keys(0, 4) == 1 + 2 + 3 + 4
    assert causal_keys(3, 2) == 4 + 5
    assert union_s([(5, 6), (0, 2), (1, 3), (2.5, 2.75)]) == 4
    assert union_s([]) == 0


def test_peaks_and_fractions():
    assert peaks("NVIDIA H200", torch.bfloat16) == (989e12, 4.8e12)
    assert peaks("NVIDIA H100 80GB HBM3", torch.float16) == (989e12, 3.35e12)
    assert peaks("NVIDIA H200", torch.float32) is None and peaks("x86_64", torch.bfloat16) is None
    r = rates(int(989e12) // 2, int(4.8e12), 1.0, peaks("NVIDIA H200", torch.bfloat16))
    assert r["tflops"] == pytest.approx(494.5) and r["tflops_fraction"] == pytest.approx(0.5)
    assert r["gb_s"] == pytest.approx(4800) and r["gb_s_fraction"] == pytest.approx(1.0)
    assert rates(10**12, 10**9, 2.0, None)["tflops_fraction"] is None


def test_decision_work_counts_the_shared_prefix_once():
    usages = [{"shared_prefix_tokens": 10, "cached_prompt_tokens": 0, "prompt_tokens": 15, "scored_tokens": 4},
              {"shared_prefix_tokens": 10, "cached_prompt_tokens": 0, "prompt_tokens": 12, "scored_tokens": 4}]
    w = decision_work(usages, reads=3)
    assert w["tokens"] == 10 + (5 + 4) + (2 + 4)
    assert w["keys"] == 55 + (50 + 15) + (60 + 10) + (20 + 3) + (48 + 10)
    assert (w["logit_rows"], w["kv_read"], w["kv_written"]) == (6, 27, 25)
    one = decision_work([{"shared_prefix_tokens": 0, "cached_prompt_tokens": 8, "prompt_tokens": 12,
                          "scored_tokens": 5}], reads=2)
    assert one["tokens"] == 4 + 5 and one["keys"] == (32 + 10) + (60 + 15)  # the cached 8 are not computed


def test_counted_forwards_restores_the_runner(tiny):
    r = tiny.runner
    with counted_forwards(r) as n:
        r.prefill_prefix(tiny.tokenizer.encode("hello there"))
    assert n[0] == 1 and "prefill_prefix" not in vars(r)


def test_bench_roofline_tiny(tmp_path, tiny):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["bench", "roofline", "--arch", "tiny", "--device", "cpu", "--tokens", "48",
                                 "--runs", "1", "--many", "2", "--batch", "1", "--batch", "3", "--json", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["bench"] == "roofline" and res["peaks"] is None and res["command"].startswith("typedlm bench roofline")
    assert res["errors"] == {}
    cases = [x["case"] for x in res["results"]]
    assert cases[:2] == ["decide", "decide_many x2"] and cases[-3:] == ["prefill 48", "decode b1", "decode b3"]
    for x in res["results"]:
        assert x["wall_s"] > 0 and x["tflops"] > 0 and x["gb_s"] > 0 and x["tokens"] > 0 and x["forwards"] >= 1
        assert x["device_s"] is None and x["host_wait_s"] is None and x["tflops_fraction"] is None
    s = Shape.of(tiny.model.config, tiny.model_vocab_size, torch.float32)  # --arch tiny is this model
    assert res["flops_per_token"] == s.flops(1, 0, 0) and res["weight_bytes"] == s.weight_bytes
    pre = next(x for x in res["results"] if x["case"] == "prefill 48")
    assert pre["flops"] == s.flops(48, 1, causal_keys(0, 48)) and pre["bytes"] == s.bytes(1, 0, 48)
    b3 = next(x for x in res["results"] if x["case"] == "decode b3")
    assert b3["flops"] == s.flops(3, 3, 3 * 50) and b3["bytes"] == s.bytes(1, 3 * 49, 3)  # 49 tokens of context
    assert res["warmup"]["graphs"] == 0 and res["warmup"]["warmup_s"] >= 0


def test_bench_roofline_bad_tokens():
    r = CliRunner().invoke(app, ["bench", "roofline", "--arch", "tiny", "--device", "cpu", "--tokens", "0"])
    assert r.exit_code == 2 and "--tokens" in r.output


def test_meter_times_then_takes_the_profiled_busy_time(tiny):
    shape = Shape.of(tiny.model.config, tiny.model_vocab_size, torch.float32)
    calls = []
    work = {"tokens": 2, "logit_rows": 1, "keys": 3, "forwards": 1, "kv_read": 0, "kv_written": 2}
    timing = Meter(tiny, shape, None, runs=3)
    timing("case", lambda: calls.append(1), lambda _: work)
    assert len(calls) == 4 and timing.rows[0]["flops"] == shape.flops(2, 1, 3) and timing.rows[0]["device_s"] is None
    profiled = Meter(tiny, shape, None, runs=3, profiling=True)
    profiled("case", lambda: calls.append(2), lambda _: work)
    # the warm call; on the CPU no profiled one (no device time to take)
    assert calls.count(2) == 1 and profiled.rows == [] and profiled.busy == {"case": None}
    profiled.busy["case"] = timing.rows[0]["wall_s"] / 4
    timing.add_busy(profiled)
    r = timing.rows[0]
    assert r["device_s"] == r["wall_s"] / 4 and r["host_wait_s"] == pytest.approx(r["wall_s"] * 3 / 4)
