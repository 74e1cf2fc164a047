"""Decisions beside streams vs alone: the same decisions, once with the engine idle and once as work of a scheduler
that decodes ``streams`` long rows (:func:`typedlm.generate.scheduled.scheduled_engine`: its forwards inside the
steps, prompt prefills in chunks), compared field by field (max |Δ| of the log scores; 0 means bit-identical).
Used by ``tests/generate/test_decide_beside_streams.py`` (CPU, fp32) and ``bench/gpu_check.py ARCH invariance``
(the H200, bf16)."""

from __future__ import annotations

from ..decide import decide, decide_many
from ..generate import SamplingParams, build_sequence
from ..generate.requests import Request
from ..generate.scheduled import scheduled_engine
from ..generate.scheduler import Scheduler


def log_scores(d) -> dict:
    return {n: list(f.log_scores.values()) for n, f in d.fields.items()}


def max_diff(a, b) -> float:
    return max(abs(x - y) for n in a for x, y in zip(a[n], b[n]))


def _decisions(engine, schema, contexts: list[str]) -> list:
    return [decide(schema, contexts[0], engine=engine, prior="none"),
            *decide_many(schema, contexts, engine=engine, prior="none")]


def decide_beside_streams(engine, schema, contexts: list[str], *, streams: int = 4, max_tokens: int = 4096,
                          warm: bool = True, step_tokens: int | None = None) -> dict:
    """``decide`` on ``contexts[0]`` and ``decide_many`` on ``contexts``, alone and then beside ``streams``
    sampled rows -> max |Δ| over every field, whether the values agree, the rows decoding at the end and the work
    forwards the decisions made. ``warm``: decide once first, so both runs read the prompts from the prefix cache;
    ``step_tokens``: the scheduler's step budget (default: the engine's setting)."""
    if warm:
        _decisions(engine, schema, contexts)
    alone = _decisions(engine, schema, contexts)
    sched = Scheduler(engine, max_batch=streams, max_queue=streams)
    sched.work.step_tokens = step_tokens or sched.work.step_tokens
    sched.start()
    try:
        ids = engine.encode_prompt(prompt="Tell me a very long story about numbers.")
        reqs = [sched.submit(Request(seq=build_sequence(
            engine, ids, SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=i), None)))
            for i in range(streams)]  # max_tokens is cut to the KV's room at admission
        while sched.batch_size < streams and not all(r.done.is_set() for r in reqs):
            reqs[0].done.wait(0.01)
        beside = _decisions(scheduled_engine(engine, sched), schema, contexts)
        running = sched.batch_size
    finally:
        for r in reqs:
            sched.cancel(r)
        sched.stop()
    return {"max_abs_diff": max(max_diff(log_scores(a), log_scores(b)) for a, b in zip(alone, beside)),
            "same_values": all(a.value_dict() == b.value_dict() for a, b in zip(alone, beside)),
            "decisions": len(alone), "streams_running_after": running, "work_forwards": sched.work.chunks}
