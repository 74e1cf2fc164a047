"""Reference decode for tests: one row, a plain KV cache, no padding, no attention mask, and the
per-row logits pipeline written out step by step (independent of the batched ``BatchSampler``).

Production decoding is the batching scheduler (``typedlm.generate.scheduler``); batched results
are checked against this loop, which shares only the per-row ``Sequence`` rules (begin_step /
append)."""

from __future__ import annotations

import time
from typing import Sequence as Seq

import torch

from typedlm.engine import Engine
from typedlm.generate.sampling import SamplingParams
from typedlm.generate.sequence import Sequence


def apply_repetition_penalty(logits: torch.Tensor, seen: Seq[int], penalty: float) -> None:
    """HF/CTRL-style: divide positive logits of seen ids by ``penalty``, multiply negative ones."""
    if penalty == 1.0 or not seen:
        return
    idx = torch.tensor(sorted(set(seen)), device=logits.device, dtype=torch.long)
    idx = idx[idx < logits.shape[-1]]
    vals = logits[idx]
    logits[idx] = torch.where(vals > 0, vals / penalty, vals * penalty)


def truncate(logits: torch.Tensor, top_k: int, top_p: float) -> None:
    """Top-k then nucleus truncation, in place (removed ids -> -inf)."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits[logits < kth] = float("-inf")
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        cum = torch.cumsum(probs, dim=-1)
        drop = cum - probs > top_p  # keep the smallest prefix whose mass reaches top_p
        logits[order[drop]] = float("-inf")


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    if params.greedy:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits, dim=-1)
    race = torch.empty_like(probs).exponential_(1.0, generator=generator)
    return int(torch.argmax(probs / race))


def select(seq: Sequence, logits: torch.Tensor) -> int:
    """The pipeline for one row: penalty -> processors -> logit_bias -> temperature -> top-k -> top-p -> padded
    ids -> grammar mask last -> sample (with the truncation fallback)."""
    p = seq.params
    seen = seq.prompt_ids + seq.output_ids
    apply_repetition_penalty(logits, seen, p.repetition_penalty)
    for proc in p.logits_processors:
        out = proc(seen, logits)
        if out is not None and out is not logits:
            logits.copy_(out)
    for t, b in p.logit_bias:
        logits[t] += b
    if not p.greedy and p.temperature != 1.0:
        logits.div_(p.temperature)
    truncating = bool(p.top_k) or p.top_p < 1.0
    work = logits.clone() if truncating else logits

    def mask(x):
        x[seq.tokenizer_vocab_size:] = float("-inf")
        if seq.masked:
            seq.grammar.apply(x)

    if truncating:
        truncate(work, p.top_k, p.top_p)
    mask(work)
    if truncating and seq.masked and not torch.isfinite(work).any():
        seq.truncation_fallbacks += 1
        work = logits
        mask(work)
    return sample(work, p, seq.generator)


@torch.inference_mode()
def run_sequence(engine: Engine, seq: Sequence) -> Sequence:
    t0 = time.perf_counter()
    ids = torch.tensor([seq.prompt_ids], device=engine.device)
    logits, cache = engine.runner.forward(ids)
    logits = logits[0, -1].float()
    engine.sync()
    t1 = time.perf_counter()
    seq.timings.prefill = t1 - t0
    while seq.begin_step():
        token = select(seq, logits)  # a fresh float32 row each step: changed in place
        seq.append(token)
        if seq.finished:
            break
        step = torch.tensor([[token]], device=engine.device)
        logits, cache = engine.runner.forward(step, cache)
        logits = logits[0, -1].float()
    engine.sync()
    seq.timings.decode = time.perf_counter() - t1
    return seq
