"""Profile of the MLX decode path on the default model (issue 19): what a prefill's lm_head, the logits copy +
torch sampler, and mlx-lm's batch cache cost, each A/B in one process (alternating runs, medians).

    python bench/mlx_profile.py [--reps 5]

1. prefill of a 42-token prompt: the model with the lm_head at every position vs the body without it and
   the last token alone (what ``MLXRunner.last_logits`` does);
2. one decode step's sampling for [B, V] logits: a copy to torch + ``BatchSampler`` vs ``MLXSampler``;
3. one decode step (b1) on mlx-lm's ``BatchKVCache`` (what typedlm decodes on) vs its ``KVCache`` (what
   mlx-lm's ``stream_generate`` decodes on)."""

import argparse
import os
import statistics
import time

import mlx.core as mx
import torch
from mlx_lm import load
from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

from typedlm.generate.mlx_sampler import MLXSampler
from typedlm.generate.sampler import BatchSampler
from typedlm.generate.sampling import SamplingParams
from typedlm.generate.sequence import Sequence
from typedlm.runner.mlx_kv import to_torch


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def ab(name: str, a, b, reps: int) -> None:
    ta, tb = [], []
    for _ in range(reps):
        ta.append(timed(a))
        tb.append(timed(b))
    ma, mb = statistics.median(ta), statistics.median(tb)
    print(f"{name}: A {ma * 1000:.1f} ms, B {mb * 1000:.1f} ms, B/A {mb / ma:.3f}")


def main(reps: int) -> None:
    model, _ = load(os.path.expanduser("~/.cache/typedlm/models/smollm2-135m-instruct"))
    ids = mx.array([list(range(100, 142))])

    def full():
        c = make_prompt_cache(model)
        mx.eval(model(ids, cache=c)[:, -1])

    def split():
        c = make_prompt_cache(model)
        model(ids[:, :-1], cache=c)
        mx.eval([x.state for x in c])
        mx.eval(model(ids[:, -1:], cache=c)[:, -1])

    ab("prefill 42 tokens: A lm_head everywhere, B last token only", full, split, reps)

    V = 49152
    for B in (1, 8):
        for label, p in (("greedy", SamplingParams(temperature=0)),
                         ("t0.8 top-p 0.9 seeded", SamplingParams(temperature=0.8, top_p=0.9, seed=1))):
            lg = mx.random.normal((B, V))
            mx.eval(lg)
            runs = {}
            for cls in (BatchSampler, MLXSampler):
                s = cls(max_batch=B, vocab_size=V, tokenizer_vocab_size=V, device=torch.device("cpu"))
                seqs = [Sequence(prompt_ids=[1], params=p, tokenizer_vocab_size=V, stop_ids=frozenset({0}),
                                 generator=torch.Generator().manual_seed(i) if p.seed is not None else None)
                        for i in range(B)]
                for i, q in enumerate(seqs):
                    s.admit(i, q)

                def step(s=s, seqs=seqs, cls=cls):
                    whole = to_torch(lg) if cls is BatchSampler else lg
                    s.finish(s.sample(s.stack([whole[i] for i in range(B)]), seqs, list(range(B))), seqs)
                runs[cls] = step
            ab(f"sampling b{B} {label}: A copy + torch sampler, B MLX sampler", runs[BatchSampler], runs[MLXSampler], reps)

    caches = {}
    for kind in ("plain", "batch"):
        c = make_prompt_cache(model) if kind == "plain" else [BatchKVCache([0]) for _ in range(len(model.layers))]
        model(ids, cache=c)
        mx.eval([x.state for x in c])
        caches[kind] = c

    def step(kind):
        return lambda: mx.eval(model(mx.array([[7]]), cache=caches[kind])[:, -1])

    ab("decode step b1: A KVCache (mlx-lm stream_generate), B BatchKVCache (typedlm)", step("plain"), step("batch"), reps)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    main(ap.parse_args().reps)
