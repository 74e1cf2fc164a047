"""Decisions beside streams are bit-identical to the same decisions alone (CPU, fp32): a decision's scores never
depend on the decode rows that share the engine."""

from typedlm.bench.beside import decide_beside_streams
from typedlm.decide import presets


def test_decisions_beside_streams_equal_decisions_alone(tiny):
    p = presets.load("support_triage")
    ctxs = [p["examples"][0], p["examples"][1] if len(p["examples"]) > 1 else p["examples"][0] + " (2)"]
    r = decide_beside_streams(tiny, p["schema"], ctxs, streams=3, max_tokens=2000)
    assert r["streams_running_after"] > 0, r  # the decisions really ran beside decoding rows
    assert r["max_abs_diff"] == 0.0 and r["same_values"], r
    assert r["decisions"] == 1 + len(ctxs)
