"""Profile of the MLX backend on this CPU (issue 19): each line an A/B in one process, the two sides run in
turn (the machine's speed drifts), medians.

    python bench/scripts/mlx_profile.py [--reps 5] [--only host,sampling,weights] [--json out.json]

1. weights: the default model as mlx-lm loads it (A) vs ``typedlm.runner.mlx_runner.load_model`` (B: the
   CPU BLAS layout, ``blas_layout``): a 41-token prefill, decode steps at batch 1 and 8 (plain ``KVCache``);
2. sampling one step's logits: a ``[B, V]`` copy + the torch ``BatchSampler`` (A) vs ``MLXSampler`` (B), on
   the default model's real next-token logits and on flat random ones (a nucleus wider than the head);
3. per-token cost around the model on the tiny random model (host work dominates there): mlx-lm's
   ``stream_generate`` (A) vs typedlm's ``run_batch`` (B), 64 greedy tokens, batch 1."""

import argparse
import json
import os
import statistics
import tempfile
import time

import mlx.core as mx
import torch
from mlx_lm import load, stream_generate
from mlx_lm.models.cache import make_prompt_cache

from typedlm.engine import load_engine
from typedlm.generate import SamplingParams, build_sequence
from typedlm.generate.mlx_sampler import MLXSampler
from typedlm.generate.sampler import BatchSampler
from typedlm.generate.scheduler import run_batch
from typedlm.generate.sequence import Sequence
from typedlm.runner.mlx_kv import to_torch
from typedlm.runner.mlx_runner import load_model
from typedlm.testing import save_tiny

DEFAULT = os.path.expanduser("~/.cache/typedlm/models/smollm2-135m-instruct")
PROMPT = [{"role": "user", "content": "Write a long story about a robot who learns to paint."}]
OUT: dict = {}


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    mx.synchronize()
    return time.perf_counter() - t


def ab(name: str, a, b, reps: int) -> None:
    ta, tb = [], []
    for _ in range(reps):
        ta.append(timed(a))
        tb.append(timed(b))
    ma, mb = statistics.median(ta), statistics.median(tb)
    OUT[name] = {"a_ms": round(ma * 1000, 2), "b_ms": round(mb * 1000, 2), "b_over_a": round(mb / ma, 3)}
    print(f"{name}: A {ma * 1000:.1f} ms, B {mb * 1000:.1f} ms, B/A {mb / ma:.3f}", flush=True)


def weights(reps: int) -> None:
    ref, tok = load(DEFAULT)
    ours, _ = load_model(DEFAULT)
    ids = mx.array([tok.apply_chat_template(PROMPT, add_generation_prompt=True)[:41]])

    def prefill(model):
        return lambda: mx.eval(model(ids, cache=make_prompt_cache(model))[:, -1])

    ab("prefill 41 tokens: A mlx-lm weights, B typedlm BLAS layout", prefill(ref), prefill(ours), reps)
    for B in (1, 8):
        caches = {}
        for m in (ref, ours):
            caches[id(m)] = make_prompt_cache(m)
            m(mx.repeat(ids, B, axis=0), cache=caches[id(m)])
            mx.eval([c.state for c in caches[id(m)]])
        feed = mx.array([[7]] * B)

        def step(m):
            return lambda: mx.eval(m(feed, cache=caches[id(m)])[:, -1])

        ab(f"decode step b{B}: A mlx-lm weights, B typedlm BLAS layout", step(ref), step(ours), reps * 2)


def sampling(reps: int) -> None:
    model, tok = load(DEFAULT)
    ids = mx.array([tok.apply_chat_template(PROMPT, add_generation_prompt=True)])
    real = model(ids)[:, -1].astype(mx.float32)
    V = real.shape[1]
    for B in (1, 8):
        for kind, lg in (("real", mx.repeat(real, B, axis=0)), ("flat", mx.random.normal((B, V)))):
            mx.eval(lg)
            for label, p in (("greedy", SamplingParams(temperature=0)),
                             ("t0.8 top-p 0.9 seeded", SamplingParams(temperature=0.8, top_p=0.9, seed=1))):
                if kind == "flat" and p.greedy:
                    continue
                runs = {}
                for cls in (BatchSampler, MLXSampler):
                    s = cls(max_batch=B, vocab_size=V, tokenizer_vocab_size=V, device=torch.device("cpu"))
                    seqs = [Sequence(prompt_ids=[1], params=p, tokenizer_vocab_size=V, stop_ids=frozenset({0}),
                                     generator=torch.Generator().manual_seed(i) if p.seed is not None else None)
                            for i in range(B)]
                    for i, q in enumerate(seqs):
                        s.admit(i, q)

                    def step(s=s, seqs=seqs, cls=cls, lg=lg):
                        whole = to_torch(lg) if cls is BatchSampler else lg
                        s.finish(s.sample(s.stack([whole[i] for i in range(B)]), seqs, list(range(B))), seqs)
                    runs[cls] = step
                ab(f"sampling b{B} {label}, {kind} logits: A copy + torch sampler, B MLX sampler",
                   runs[BatchSampler], runs[MLXSampler], reps)


def host(reps: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        save_tiny(d)
        eng = load_engine(d, backend="mlx", progress=False)
        model, tok = load(d)
    ids = eng.encode_prompt(messages=PROMPT)

    def theirs():
        list(stream_generate(model, tok, ids, max_tokens=64))

    def ours():
        run_batch(eng, [build_sequence(eng, ids, SamplingParams(max_tokens=64, temperature=0), None)], max_batch=1)

    theirs(), ours()
    ab("tiny model, 64 tokens b1: A mlx-lm stream_generate, B typedlm run_batch", theirs, ours, reps)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="host,sampling,weights")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    parts = {"host": host, "sampling": sampling, "weights": weights}
    for name in args.only.split(","):
        parts[name](args.reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": f"python bench/scripts/mlx_profile.py --reps {args.reps} --only {args.only}",
                       "machine": f"{os.cpu_count()}-core {os.uname().machine}, load {os.getloadavg()[0]:.1f}",
                       "mlx": mx.__version__, "lines": OUT}, f, indent=2)
