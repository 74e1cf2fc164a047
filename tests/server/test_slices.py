"""Sliced decide (``--decide-mode sliced``): a decision on its own thread, paused at layer boundaries outside the
slice of each decode step the engine thread lends it (typedlm/server/slices.py).

Exact by construction (the decision's own forwards, unchanged): with batch invariance on (fp32, CPU) a decision
made in slices beside decoding streams gives the same probabilities bit for bit as the one made alone, and greedy
streams give the same tokens with decisions beside them as alone. The gate: a worker passes a boundary only
inside a slice while streams decode, and freely when none does.
"""

import asyncio
import threading
import time

import pytest

from typedlm.decide import decide, presets
from typedlm.generate.api import build_sequence
from typedlm.generate.sampling import SamplingParams
from typedlm.generate.scheduler import Request, Scheduler, run_batch
from typedlm.grammar.spec import make_constraint
from typedlm.server.interleave import run_stepwise
from typedlm.server.slices import DecideSlices, checkpoint, decoder_layers
from typedlm.server.state import ServerConfig

PRESET = "support_triage"


@pytest.fixture
def invariant(tiny):
    before = tiny.runner.invariant
    assert tiny.runner.set_invariant(True)
    yield tiny
    tiny.runner.set_invariant(before)


def sliced_scheduler(engine, share=0.5):
    sched = Scheduler(engine, max_batch=4).start()
    slices = DecideSlices(decoder_layers(engine.runner.model), lambda: bool(sched.batch_size or sched.queue_depth),
                          share=share)
    sched.side_work = slices.lend
    return sched, slices


def greedy_rows(engine, n=3, max_tokens=48):
    return [build_sequence(engine, engine.encode_prompt(prompt=f"Count to {i}."),  # no early end: the grammar
                           SamplingParams(max_tokens=max_tokens, temperature=0), make_constraint(regex="[a-z ]{500}"))
            for i in range(n)]


def test_sliced_decision_beside_streams_is_bit_identical_and_streams_unchanged(invariant):
    tiny = invariant
    p = presets.load(PRESET)
    ctx = p["examples"][1]
    alone = decide(p["schema"], ctx, engine=tiny).to_dict()
    solo_tokens = [r.token_ids for r in run_batch(tiny, greedy_rows(tiny), max_batch=4)]

    sched, slices = sliced_scheduler(tiny)
    try:
        times: list[float] = []
        reqs = [sched.submit(Request(seq=s, on_event=lambda ev: times.append(time.perf_counter())))
                for s in greedy_rows(tiny)]
        while not times:
            time.sleep(0.005)
        t0 = time.perf_counter()
        got = asyncio.run(run_stepwise(tiny, sched, decide, p["schema"], ctx, prefill_chunk=32, row_chunk=1,
                                       slices=slices)).to_dict()
        t1 = time.perf_counter()
        for r in reqs:
            assert r.done.wait(120)
    finally:
        sched.stop()
    assert slices.parks > 0 and slices.slices > 0, "the decision waited for slices while the streams decoded"
    assert sum(t0 < t < t1 for t in times) >= 2, "the streams decoded while the decision ran"
    assert got["fields"] == alone["fields"] and got["value"] == alone["value"]  # probabilities: the same floats
    assert [r.result.token_ids for r in reqs] == solo_tokens


def test_worker_passes_boundaries_only_inside_slices_while_streams_decode():
    busy = threading.Event()
    busy.set()
    slices = DecideSlices([], busy.is_set, share=0.5)
    passes, lent, stop = [], [], threading.Event()

    def worker():
        with slices.worker():
            while not stop.is_set():
                checkpoint()
                passes.append(time.perf_counter())
                time.sleep(0.0002)

    t = threading.Thread(target=worker)
    t.start()
    for _ in range(40):  # the engine: 4 ms steps, each lending a 2 ms slice
        time.sleep(0.004)
        t0 = time.perf_counter()
        slices.lend()
        lent.append((t0, slices._deadline, time.perf_counter()))
    busy.clear()  # no stream: the worker runs freely
    free_from = time.perf_counter()
    time.sleep(0.05)
    stop.set()
    t.join(5)
    assert 0.004 <= slices.step_s < 0.02 and slices.slices >= 35  # the steps' own time, not the slices'
    inside = [x for x in passes if x < free_from]
    outside = [x for x in inside if not any(a <= x <= e for a, _, e in lent)]
    # (a pass is stamped just after its boundary: a thread descheduled in between may stamp it late)
    assert len(inside) > 50 and len(outside) <= 0.05 * len(inside), (len(outside), len(inside))
    assert sum(x > free_from for x in passes) > 20


def test_without_streams_a_sliced_decision_never_waits(tiny, no_prefix_cache):
    p = presets.load(PRESET)
    sched, slices = sliced_scheduler(tiny)
    try:
        got = asyncio.run(run_stepwise(tiny, sched, decide, p["schema"], p["examples"][0], prefill_chunk=32,
                                       row_chunk=1, slices=slices))
    finally:
        sched.stop()
    assert slices.parks == 0 and slices.slices == 0
    assert got.to_dict()["fields"] == decide(p["schema"], p["examples"][0], engine=tiny).to_dict()["fields"]


def test_hooks_on_every_layer_and_the_head_once_and_share_must_be_positive(tiny):
    model = tiny.runner.model
    assert decoder_layers(model) == [*model.model.layers, model.lm_head]
    for _ in range(3):  # one server after another on the same engine: still one hook per module
        DecideSlices(decoder_layers(model), lambda: False, share=1.0)
    assert all(list(m._forward_pre_hooks.values()).count(checkpoint) == 1 for m in decoder_layers(model))
    assert decoder_layers(object()) == []
    with pytest.raises(ValueError, match="decide_step_share must be > 0"):
        ServerConfig(decide_mode="sliced", decide_step_share=0)
