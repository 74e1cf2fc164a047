"""``typedlm bench itl``: one server for every run, decide latency alone and beside the streams, ratios against
the issue's targets, and bad ``--mode`` values refused by name."""

import pytest

from typedlm.bench.itl import _check_modes, bench_itl, to_markdown


def test_bench_itl_reports_decisions_alone_and_beside_and_the_target_ratios(tiny):
    res = bench_itl(tiny, modes=("alone", "decide-alone", "sliced@0.5"), streams=2, rounds=2, max_tokens=24,
                    decide_clients=2, decisions=2, preset="content_moderation")
    alone, solo, sliced = res["runs"]
    assert [r["mode"] for r in res["runs"]] == ["alone", "decide-alone", "sliced@0.5"]
    assert alone["itl_count"] >= 2 * 2 * 20 and alone["decisions"] == 0 and alone["p99_vs_alone"] == 1.0
    assert solo["itl_ms"] is None and solo["decisions"] >= 2 and solo["decide_p50_vs_alone"] == 1.0
    assert solo["solo"]["decisions"] >= 2  # one client alone: one decision at a time
    assert sliced["p99_vs_alone"] == round(sliced["itl_ms"]["p99"] / alone["itl_ms"]["p99"], 2)
    if sliced["decisions"]:  # decisions that started and ended while the streams ran
        assert sliced["decide_p50_vs_alone"] == round(sliced["decide_s"]["p50"] / solo["decide_s"]["p50"], 2)
        assert sliced["meets_targets"] == (sliced["p99_vs_alone"] <= 1.2 and sliced["decide_p50_vs_alone"] <= 2.0)
    assert res["targets"] == {"p99_vs_alone": 1.2, "decide_p50_vs_alone": 2.0} and res["rounds"] == 2
    md = to_markdown({**res, "command": "typedlm bench itl"})
    assert "| sliced@0.5 |" in md and "decide p50 vs alone" in md and "One decision at a time" in md


@pytest.mark.parametrize("mode,ok", [("sliced@0.5", True), ("decide-alone", True), ("parallel@2", False),
                                     ("sliced@x", False), ("sliced@0", False), ("sometimes", False)])
def test_mode_names(mode, ok):
    assert (_check_modes((mode,)) is None) == ok
