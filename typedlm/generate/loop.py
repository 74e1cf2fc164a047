"""The single-request decode loop: prefill once, then one token per forward with a KV cache."""

from __future__ import annotations

import time

import torch

from ..engine import Engine
from .sequence import Sequence


@torch.inference_mode()
def run_sequence(engine: Engine, seq: Sequence) -> Sequence:
    t0 = time.perf_counter()
    ids = torch.tensor([seq.prompt_ids], device=engine.device)
    logits, cache = engine.forward(ids)
    logits = logits[0, -1].float()
    _sync(engine)
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
    _sync(engine)
    seq.timings.decode = time.perf_counter() - t1
    return seq


def _sync(engine: Engine) -> None:
    if engine.device.type == "cuda":
        torch.cuda.synchronize(engine.device)
