"""``typedlm bench itl``: one server for every run, decide latency alone and beside the streams (the decisions' work
inside the engine's steps, one run per step budget), ratios against the issue's targets, and bad ``--mode`` values
refused by name."""

import pytest

from typedlm.bench.itl import DecideFailed, _check_modes, _clients_alone, bench_itl, to_markdown
from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server


def test_bench_itl_reports_decisions_alone_and_beside_and_the_target_ratios(tiny):
    res = bench_itl(tiny, modes=("alone", "decide-alone", "beside@64"), streams=2, rounds=2, max_tokens=24,
                    decide_clients=2, decisions=2, preset="content_moderation")
    alone, solo, beside = res["runs"]
    assert [r["mode"] for r in res["runs"]] == ["alone", "decide-alone", "beside@64"]
    assert alone["itl_count"] >= 2 * 2 * 20 and alone["decisions"] == 0 and alone["p99_vs_alone"] == 1.0
    assert solo["itl_ms"] is None and solo["decisions"] >= 2 and solo["decide_p50_vs_alone"] == 1.0
    assert solo["solo"]["decisions"] >= 2  # one client alone: one decision at a time
    assert beside["p99_vs_alone"] == round(beside["itl_ms"]["p99"] / alone["itl_ms"]["p99"], 2)
    if beside["decisions"]:  # decisions that started and ended while the streams ran
        assert beside["decide_p50_vs_alone"] == round(beside["decide_s"]["p50"] / solo["decide_s"]["p50"], 2)
        assert beside["meets_targets"] == (beside["p99_vs_alone"] <= 1.2 and beside["decide_p50_vs_alone"] <= 2.0)
    assert res["targets"] == {"p99_vs_alone": 1.2, "decide_p50_vs_alone": 2.0} and res["rounds"] == 2
    assert res["step_tokens"] == tiny.settings.step_tokens
    steps = beside["steps"]  # the engine's steps beside the streams, with and without work
    assert alone["steps"]["with_work"]["n"] == 0 and alone["steps"]["without_work"]["n"] > 20, alone["steps"]
    assert steps["with_work"]["n"] > 0 and steps["without_work"]["n"] > 0, steps
    md = to_markdown({**res, "command": "typedlm bench itl"})
    assert "| beside@64 |" in md and "decide p50 vs alone" in md and "One decision at a time" in md


@pytest.mark.parametrize("mode,ok", [("beside@128", True), ("beside", True), ("decide-alone", True),
                                     ("beside@64/2", True), ("beside@64/", False), ("beside@64/0", False),
                                     ("alone@2", False), ("beside@x", False), ("beside@0", False),
                                     ("sliced", False), ("sometimes", False)])
def test_mode_names(mode, ok):
    assert (_check_modes((mode,)) is None) == ok


def test_a_failing_decide_client_fails_the_bench_loudly(tiny):
    """A decision the server refuses is not a silent hole in the decide numbers: the run raises with its status."""
    with live_server(create_app(tiny, ServerConfig(warmup=False)), timeout=120) as url:
        with pytest.raises(DecideFailed, match="HTTP 400"):
            _clients_alone(url, {"schema": {"type": "nonsense"}, "context": "x"}, clients=2, decisions=3)
