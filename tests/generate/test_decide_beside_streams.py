"""Decisions beside streams are the same decisions as alone (CPU, fp32): a decision's forwards are work of the
engine's steps (typedlm/generate/scheduled.py), cut into chunks to fit each step's token budget. With
batch-invariant scoring (CUDA's default, opt-in on the CPU) every score is bit-identical however its prefills and
passes were cut; without it, a chunk is a different GEMM shape, so scores may move in the last bits (the
project's tolerance contract, ARCHITECTURE.md "Decide"), never the values."""

import pytest

from typedlm.bench.beside import decide_beside_streams
from typedlm.decide import presets


@pytest.fixture
def invariant(tiny):
    before = tiny.runner.invariant
    assert tiny.runner.set_invariant(True)
    yield tiny
    tiny.runner.set_invariant(before)


@pytest.mark.parametrize("exact", [True, False])
def test_decisions_beside_streams_equal_decisions_alone(tiny, exact):
    before = tiny.runner.invariant
    assert tiny.runner.set_invariant(exact) == exact
    try:
        p = presets.load("support_triage")
        ctxs = [p["examples"][0], p["examples"][1]]
        r = decide_beside_streams(tiny, p["schema"], ctxs, streams=3, max_tokens=2000)
    finally:
        tiny.runner.set_invariant(before)
    assert r["streams_running_after"] > 0, r  # the decisions really ran beside decoding rows
    assert r["work_forwards"] > 0, r  # ... as work of the scheduler's steps
    assert r["same_values"] and r["decisions"] == 1 + len(ctxs), r
    assert r["max_abs_diff"] == 0.0 if exact else r["max_abs_diff"] < 1e-4, r


@pytest.mark.parametrize("graphed", [False, True])
def test_chunked_decisions_beside_streams_are_bit_identical_with_batch_invariance(invariant, no_prefix_cache, graphed):
    """Long prompts, nothing cached, a small step budget: prompt prefills and scoring passes go in many chunks
    while three streams decode, and every score is the same float as alone. ``graphed``: every scoring forward
    that fits goes through the score graphs' code (CUDA's path; on the CPU their eager body at padded sizes), the
    chunks of a prompt (``extend_prefix``) and of a pass on its prefix too."""
    tiny = invariant
    graphs = tiny.runner.score_graphs
    before, graphs.enabled = graphs.enabled, graphed
    passes = graphs.passes
    try:
        p = presets.load("support_triage")
        ctxs = [" ".join(p["examples"] * 2), p["examples"][1], p["examples"][2] + " " + p["examples"][0]]
        r = decide_beside_streams(tiny, p["schema"], ctxs, streams=3, max_tokens=2000, warm=False, step_tokens=64)
    finally:
        graphs.enabled = before
    assert r["streams_running_after"] > 0, r
    assert r["work_forwards"] > 2 * (1 + len(ctxs)), r  # more forwards than whole prefills and passes would make
    assert (graphs.passes - passes > r["work_forwards"]) == graphed, (graphs.passes - passes, r)
    assert r["max_abs_diff"] == 0.0 and r["same_values"], r


def test_mixed_step_chunks_ride_in_decode_forwards_and_decisions_stay_bit_identical(no_prefix_cache):
    """``mixed_step``: each step's decision chunk rides in the decode rows' forward (runner/mixed.py: one row block,
    attention split); on the CPU the mixed body runs eagerly with the score graphs' code. The decisions are the same
    floats as alone, and the streams keep decoding."""
    from typedlm.config import Settings
    from typedlm.testing import tiny_engine

    eng = tiny_engine(settings=Settings(mixed_step=True, batch_invariant=True, prefix_cache_gb=0))
    eng.runner.score_graphs.enabled = True  # the graphs' code on the CPU (eager at the padded sizes)
    p = presets.load("support_triage")
    ctxs = [" ".join(p["examples"] * 2), p["examples"][1]]
    r = decide_beside_streams(eng, p["schema"], ctxs, streams=3, max_tokens=2000, warm=False, step_tokens=64)
    mixed = eng.runner.forwards(eng.runner.static_kv).mixed
    assert mixed is not None and mixed.steps > 2, (mixed and mixed.steps, r)  # chunks rode decode forwards
    assert r["streams_running_after"] > 0 and r["work_forwards"] >= mixed.steps, r
    assert r["max_abs_diff"] == 0.0 and r["same_values"], r
