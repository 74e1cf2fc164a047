"""Host time to fill the grammar masks of one decode step for a batch of rows: llguidance row by row
(``RowState.fill_mask``) vs in one batched call (its ``MaskFiller``: llguidance's ``LLExecutor`` threads),
and xgrammar's filler (``BatchGrammarMatcher``) beside them, on a Qwen2.5 vocabulary.

Each engine's rows walk the ``typedlm bench gen`` schema: at every step each row takes a random allowed
token (seeded), like a random-weight model, and a row that completes starts over, so the batch holds
rows in many different states. A matcher keeps the mask of its current state (a second fill of the same
state is nearly free), so the two llguidance fills run on two walks of their own, each on its own
compile, with the same seeds: the same states, which the equal masks check; their order alternates per
step. No model weights, no GPU: CPU only.

    python bench/scripts/mask_fill.py --rows 32 --steps 200 [--threads N] --json bench/results/mask-fill-cpu.json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import time

import numpy as np
import torch


def tokenizer_info(vocab: str):
    import xgrammar as xgr

    if vocab == "qwen":
        from typedlm.testing.archs import ARCHS, qwen_tokenizer

        tok, size, stops = qwen_tokenizer(), ARCHS["qwen2.5-7b"]["vocab_size"], [151645, 151643]
    else:
        from typedlm.testing import default_tokenizer

        tok = default_tokenizer()
        size, stops = len(tok), [tok.eos_token_id]
    return xgr.TokenizerInfo.from_huggingface(tok, vocab_size=size, stop_token_ids=stops), stops


def allowed(row: torch.Tensor) -> np.ndarray:
    return np.flatnonzero(np.unpackbits(row.numpy().view(np.uint8), bitorder="little"))


class Walk:
    """``rows`` matchers of one compiled grammar, each taking a random allowed token per step."""

    def __init__(self, compiled, rows: int, stops: list[int], seed: int):
        self.new = compiled.new_state
        self.matchers = [self.new() for _ in range(rows)]
        self.stops = set(stops)
        self.rng = np.random.default_rng(seed)
        self.restarts = 0

    def advance(self, mask: torch.Tensor) -> None:
        for i, m in enumerate(self.matchers):
            ids = [t for t in allowed(mask[i]).tolist() if t not in self.stops]
            if not ids:  # complete (or dead): a fresh row
                self.matchers[i] = self.new()
                self.restarts += 1
                continue
            if not m.accept([int(self.rng.choice(ids))]):
                raise RuntimeError(f"row {i}: an allowed token was refused")


def summary(ms: list[float], rows: int) -> dict:
    qs = statistics.quantiles(ms, n=10)
    return {"mean_ms": round(statistics.fmean(ms), 3), "p50_ms": round(statistics.median(ms), 3),
            "p90_ms": round(qs[-1], 3), "per_row_us": round(1000 * statistics.fmean(ms) / rows, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--vocab", choices=("qwen", "default"), default="qwen")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, help="llguidance executor threads (default: "
                                                "llguidance's, 80%% of the cores up to 32)")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    import llguidance

    from typedlm.bench.gen import SCHEMA
    from typedlm.grammar.compiler import Grammars
    from typedlm.grammar.spec import make_constraint

    info, stops = tokenizer_info(args.vocab)
    words = (info.vocab_size + 31) // 32
    c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
    llg = Walk(Grammars(info, engine="llguidance", threads=args.threads).compile(c)[0], args.rows, stops, args.seed)
    llg_one = Walk(Grammars(info, engine="llguidance").compile(c)[0], args.rows, stops, args.seed)
    xg = Walk(Grammars(info, engine="xgrammar").compile(c)[0], args.rows, stops, args.seed)
    rows = list(range(args.rows))
    one, many = torch.zeros(args.rows, words, dtype=torch.int32), torch.zeros(args.rows, words, dtype=torch.int32)
    xmask = torch.zeros(args.rows, words, dtype=torch.int32)
    per_row, batched, xgr_batched = [], [], []

    def fill_per_row():
        t = time.perf_counter()
        for i, m in enumerate(llg_one.matchers):
            m.fill_mask(one, i)
        per_row.append(1000 * (time.perf_counter() - t))

    def fill_batched():
        t = time.perf_counter()
        llg.matchers[0].filler.fill(llg.matchers, many, rows)
        batched.append(1000 * (time.perf_counter() - t))

    for step in range(args.steps):
        for f in ((fill_per_row, fill_batched) if step % 2 else (fill_batched, fill_per_row)):
            f()
        if not torch.equal(one, many):
            raise RuntimeError(f"step {step}: the batched fill wrote other masks than the per-row fill")
        llg.advance(many)
        llg_one.advance(one)
        t = time.perf_counter()
        xg.matchers[0].filler.fill(xg.matchers, xmask, rows)
        xgr_batched.append(1000 * (time.perf_counter() - t))
        xg.advance(xmask)

    out = {"bench": "mask_fill", "rows": args.rows, "steps": args.steps, "vocab": args.vocab,
           "vocab_size": info.vocab_size, "schema": "typedlm bench gen SCHEMA, any_whitespace=False",
           "cpu_count": os.cpu_count(), "llg_threads": args.threads or "llguidance default", "machine": platform.processor() or platform.machine(),
           "llguidance": llguidance.__version__, "xgrammar": importlib.metadata.version("xgrammar"),
           "llguidance_per_row": summary(per_row, args.rows), "llguidance_batched": summary(batched, args.rows),
           "xgrammar_batched": summary(xgr_batched, args.rows),
           "restarts": {"llguidance": llg.restarts, "xgrammar": xg.restarts}}
    out["batched_speedup"] = round(out["llguidance_per_row"]["mean_ms"] / out["llguidance_batched"]["mean_ms"], 2)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
