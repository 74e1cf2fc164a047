"""The static KV slots (``typedlm/runner/static_kv.py``) beside the dynamic ``BatchKV``: a multi-token step gives
the logits of one-token steps, and the engine's shared static KV survives a larger scheduler."""

import pytest
import torch

from typedlm.generate import SamplingParams, build_sequence
from typedlm.generate.scheduler import Request, Scheduler
from typedlm.runner.static_kv import StaticKV

from tests.generate.test_scheduler import single


@pytest.mark.parametrize("kind", ["BatchKV", "StaticKV"])
def test_multi_token_step_gives_the_logits_of_one_token_steps(tiny, kind):
    """A KV step with several tokens for one row (BatchKV: right-padded, masked for the others;
    StaticKV: the eager path from each row's length) gives the same next-token logits as feeding
    the same tokens one step at a time, and so do the one-token steps after it."""
    prompts = ["a b c", "free text here", "x"]

    def batch(ps):
        kv = tiny.runner.decode_cache(3, dynamic=True) if kind == "BatchKV" else \
            StaticKV(tiny.model, device=tiny.device, dtype=tiny.dtype, capacity=3, max_len=64)
        slots = []
        for p in ps:
            ids = torch.tensor([tiny.encode_prompt(prompt=p)])
            slots.append(kv.acquire())
            kv.prefill(ids, slots[-1:])
        return kv, slots

    feeds = [[11, 12, 13, 14], [21], [31, 32]]
    with torch.no_grad():  # not inference_mode: StaticKV built here would leave the shared model's fused weights as inference tensors
        kv, slots = batch(prompts)
        multi = kv.extend(feeds, slots)
        after = kv.step([5, 6, 7], slots)
        singles, afters = [], []
        for row, p in enumerate(prompts):
            one, s1 = batch([p])
            for t in feeds[row]:
                out = one.step([t], s1)
            singles.append(out[0])
            afters.append(one.step([5 + row], s1)[0])
    for row in range(3):
        assert torch.allclose(multi[row], singles[row], atol=1e-4), row
        assert torch.allclose(after[row], afters[row], atol=1e-4), row


def test_a_larger_scheduler_leaves_an_earlier_one_working(tiny):
    """The engine's static KV is shared; a later scheduler with more rows makes a larger one, and the
    earlier scheduler (idle meanwhile, e.g. another server on the same engine) still decodes on its own
    (it was freed under it once: IndexError in every later prefill)."""
    params = SamplingParams(max_tokens=6, temperature=0)
    first = Scheduler(tiny, max_batch=1, max_queue=4)
    second = Scheduler(tiny, max_batch=tiny.runner.static_kv.capacity + 3, max_queue=4)
    assert second.kv is not first.kv and second.kv.capacity > first.kv.capacity
    for sched in (first, second):
        req = sched.submit(Request(build_sequence(tiny, tiny.encode_prompt(prompt="a"), params, None)))
        while sched.has_work():
            sched.step()
        assert req.result.finish_reason == "length"
        assert req.result.token_ids == single(tiny, "a", params, None).token_ids
