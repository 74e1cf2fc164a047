"""Reference decode for tests: one row, a plain KV cache, no padding, no attention mask.

Production decoding is the batching scheduler (``typedlm.generate.scheduler``); batched results
are checked against this independent loop, which shares only the per-row ``Sequence`` rules."""

from __future__ import annotations

import time

import torch

from typedlm.engine import Engine
from typedlm.generate.sequence import Sequence


@torch.inference_mode()
def run_sequence(engine: Engine, seq: Sequence) -> Sequence:
    t0 = time.perf_counter()
    ids = torch.tensor([seq.prompt_ids], device=engine.device)
    logits, cache = engine.forward(ids)
    logits = logits[0, -1].float()
    engine.sync()
    t1 = time.perf_counter()
    seq.timings.prefill = t1 - t0
    while seq.begin_step():
        token = seq.select(logits)  # a fresh float32 row each step: changed in place
        seq.append(token)
        if seq.finished:
            break
        step = torch.tensor([[token]], device=engine.device)
        logits, cache = engine.forward(step, cache)
        logits = logits[0, -1].float()
    engine.sync()
    seq.timings.decode = time.perf_counter() - t1
    return seq

