"""Decisions as work of the engine's steps (typedlm/generate/work.py, scheduled.py): each step's token budget is
kept while decode rows run, a long prompt is prefilled in chunks while streams keep decoding, a decide_many's
passes are cut too, work goes whole when nothing decodes, a burst of rows cannot starve decisions, and a
cancelled or failed decision leaves nothing queued."""

import threading
import time

import pytest

from typedlm.decide import decide, decide_many, presets
from typedlm.errors import TypedLMError
from typedlm.generate.api import build_sequence
from typedlm.generate.requests import Request
from typedlm.generate.sampling import SamplingParams
from typedlm.generate.scheduled import ScheduledRunner, scheduled_engine
from typedlm.generate.scheduler import Scheduler
from typedlm.generate.work import MIN_CHUNK, Work, WorkQueue
from typedlm.grammar.spec import make_constraint
from typedlm.runner.contract import Whole

PRESET = "support_triage"


class Recording(Scheduler):
    """A scheduler that writes down each step's decode rows and work: (rows, [(job kind, chunked, tokens)])."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.log: list[tuple[int, list]] = []

    def schedule(self):
        plan = super().schedule()
        if plan.work:
            self.log.append((len(self.running), [(type(w.job).__name__, w.job.chunked, n) for w, n in plan.work]))
        return plan


def long_context(p) -> str:
    return " ".join(p["examples"] * 2)


def streams(tiny, sched, n=2, max_tokens=4000):
    """``n`` greedy rows that outlast any decision here; returns (requests, token arrival times)."""
    times: list[float] = []
    reqs = [sched.submit(Request(seq=build_sequence(tiny, tiny.encode_prompt(prompt=f"go {i}"),
                                                    SamplingParams(max_tokens=max_tokens, temperature=0),
                                                    make_constraint(regex="[a-z]{5000}")),
                                 on_event=lambda ev: times.append(time.perf_counter())))
            for i in range(n)]
    while sched.batch_size < n:
        time.sleep(0.005)
    return reqs, times


@pytest.fixture
def beside(tiny, no_prefix_cache):
    """A started recording scheduler with two streams decoding and a 48-token step budget."""
    sched = Recording(tiny, max_batch=4)
    sched.work.step_tokens = 48
    sched.start()
    reqs, times = streams(tiny, sched)
    yield sched, times
    for r in reqs:
        sched.cancel(r)
    sched.stop()


def test_budget_per_step_chunked_prefill_and_streams_decoding(tiny, beside):
    sched, times = beside
    p = presets.load(PRESET)
    ctxs = [long_context(p), p["examples"][1], p["examples"][2]]
    t0 = time.perf_counter()
    got = decide_many(p["schema"], ctxs, engine=scheduled_engine(tiny, sched))
    t1 = time.perf_counter()
    steps = [(rows, work) for rows, work in sched.log if rows]
    assert len(steps) > 10, sched.log
    for rows, work in steps:  # decode rows first, then work within what is left; a whole pass goes alone
        assert sum(n for _, _, n in work) <= 48 - rows or (len(work) == 1 and not work[0][1]), (rows, work)
    kinds = {k for _, work in steps for k, _, _ in work}
    assert {"PromptPrefill", "ChunkedPass"} <= kinds, kinds  # the shared prefix and the contexts' pass, in chunks
    assert sum(t0 < t < t1 for t in times) >= len(steps), "the streams decoded a token in every step with work"
    alone = decide_many(p["schema"], ctxs, engine=tiny)
    assert [d.value_dict() for d in got] == [d.value_dict() for d in alone]
    assert len(sched.work) == 0


def test_a_long_prompt_prefill_goes_in_budget_sized_chunks(tiny, beside):
    sched, _ = beside
    p = presets.load(PRESET)
    d = decide(p["schema"], long_context(p), engine=scheduled_engine(tiny, sched), packing="packed")
    ids = d.usage["prompt_tokens"]
    chunks = [n for rows, work in sched.log for k, _, n in work if k == "PromptPrefill"]
    assert sum(chunks) == ids and len(chunks) >= ids // 48, chunks  # each at most the room a step left
    assert max(chunks) <= 48 - 2


def test_without_streams_work_goes_whole_and_equals_the_direct_decision(tiny, no_prefix_cache):
    sched = Recording(tiny).start()
    try:
        p = presets.load(PRESET)
        got = decide(p["schema"], long_context(p), engine=scheduled_engine(tiny, sched)).to_dict()
    finally:
        sched.stop()
    assert sched.log and all(rows == 0 for rows, _ in sched.log)
    assert {k for _, work in sched.log for k, _, _ in work} <= {"PromptPrefill", "Whole"}  # never cut
    alone = decide(p["schema"], long_context(p), engine=tiny).to_dict()
    assert got["fields"] == alone["fields"]  # the same forwards: the same floats


def test_a_burst_of_rows_cannot_starve_work(tiny):
    q = WorkQueue(8)
    job = tiny.runner.prompt_prefill(list(range(5, 200)))
    q.push(Work(job, owner=None))
    q.push(Work(Whole(3, lambda: "x"), owner=None))
    assert [n for _, n in q.take(decode_tokens=8)] == [MIN_CHUNK]  # rows fill the budget: still one chunk
    assert q.take(decode_tokens=8) == []  # ... every other step: no stream waits on work two steps running
    assert [n for _, n in q.take(decode_tokens=5)] == [3]  # what the rows leave, no more
    assert [n for _, n in q.take(decode_tokens=0)] == [job.left]  # nothing decoding: whole, one at least
    with pytest.raises(TypedLMError, match="step_tokens and step_forwards must be >= 1"):
        WorkQueue(0)


def test_a_step_beside_rows_carries_at_most_step_forwards_every_other_step(tiny):
    q = WorkQueue(128, step_forwards=2)
    for _ in range(3):
        q.push(Work(Whole(3, lambda: "x"), owner=None))
    got = [[n for _, n in q.take(decode_tokens=4)] for _ in range(4)]
    assert got == [[3, 3], [], [3, 3], []]  # nothing is run here: the same two items each time
    assert [n for _, n in q.take(decode_tokens=0)] == [3, 3, 3]  # nothing decoding: every step, no forward cap


def test_a_cancelled_decision_leaves_nothing_queued(tiny, beside):
    sched, times = beside
    p = presets.load(PRESET)
    engine = scheduled_engine(tiny, sched)
    err: list[BaseException] = []

    def run():
        try:
            decide(p["schema"], long_context(p) * 2, engine=engine)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            err.append(e)

    t = threading.Thread(target=run)
    t.start()
    while sched.work.chunks < 2:
        time.sleep(0.002)
    engine.runner.cancel()
    t.join(60)
    assert not t.is_alive() and err and "cancelled" in str(err[0])
    n = len(times)
    time.sleep(0.3)
    assert len(sched.work) == 0 and len(times) > n, "the streams go on; the decision's work is gone"


def test_a_failed_forward_fails_only_its_decision(tiny, beside):
    sched, times = beside
    p = presets.load(PRESET)
    calls = []

    def forward(ids, cache=None, **kw):
        calls.append(ids.shape)
        if len(calls) == 3:
            raise RuntimeError("boom")
        return tiny.runner.forward(ids, cache, **kw)

    broken = tiny.with_runner(ScheduledRunner(tiny.runner.wrapped(forward), sched))
    with pytest.raises(RuntimeError, match="boom"):
        decide(p["schema"], long_context(p), engine=broken, packing="packed")
    assert len(sched.work) == 0
    n = len(times)
    ok = decide(p["schema"], p["examples"][0], engine=scheduled_engine(tiny, sched))
    assert ok.value_dict() == decide(p["schema"], p["examples"][0], engine=tiny).value_dict()
    assert len(times) > n
