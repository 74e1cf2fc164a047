"""Host time of one ``decide_many`` call on this CPU (issue 20): a tiny random-weight Qwen2.5-shaped model (2 layers,
hidden 64) with the real Qwen2.5 tokenizer (151,643 ranks, lm_head 152,064 rows), preset ``support_triage`` (25 fields),
N contexts of ~400 tokens. The model is tiny so the wall time is mostly what the host does around the forwards. Near
ties are not rescored (``--rescore`` to keep the CPU default): the host path of batch-invariant scoring, the CUDA default.

Prints JSON (``--json PATH`` also writes it) and a table: wall p50 without the profiler, then one call under cProfile
split into parts by cumulative time of the functions that do them (the parts do not nest):

    forward      the model calls (``ModelRunner.forward``): device work on a GPU
    log-probs    the full-vocabulary log-softmax and gathers on the logits (``score._gather``): device work on a GPU
    mask         the pass's bool mask made additive (``ModelRunner._additive``): device work on a GPU
    prompts      rendering + tokenizing the prompts (``api.prepare``)
    trie         branch-point log-probs -> question scores (``trie.score_trie`` / ``trie.score_tries``)
    host other   the rest: pass layout (token trees, masks, positions), prior, constraints, result assembly
Also the Python function calls of that call (``python_calls``): a host measure the machine's load does not change.

    python bench/decide_many_host.py --contexts 64 --runs 3 --json bench/results/decide-many-host-cpu.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import re
import statistics
import sys
import time

import torch

PARTS = {  # part -> functions ("file:function") whose cumulative time it is
    "forward": [r"runner/model_runner\.py:\d+\(forward\)"],
    "log-probs": [r"decide/score\.py:\d+\(_gather\)", r"decide/score\.py:\d+\(_log_probs\)"],
    "mask": [r"runner/model_runner\.py:\d+\(_additive\)"],
    "prompts": [r"decide/api\.py:\d+\(prepare\)"],
    "trie": [r"decide/trie\.py:\d+\(score_trie\)", r"decide/trie\.py:\d+\(score_tries\)"],
}


def tiny_qwen_engine():
    from transformers import AutoConfig, AutoModelForCausalLM

    from typedlm.bench.models import qwen_tokenizer
    from typedlm.engine import engine_from_model

    cfg = AutoConfig.for_model("qwen2", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=152064,
                               max_position_embeddings=32768, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    return engine_from_model(model, qwen_tokenizer(), name="tiny-random-qwen2.5", device="cpu", dtype=torch.float32)


def parts(stats: pstats.Stats, wall: float) -> dict:
    out = {}
    for part, pats in PARTS.items():
        out[part] = sum(v[3] for (f, line, name), v in stats.stats.items()
                        if any(re.search(p, f"{f}:{line}({name})") for p in pats))
    out["host other"] = wall - sum(out.values())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    ap.add_argument("--json", help="also write the JSON here")
    ap.add_argument("--top", type=int, default=0, help="also print the top N functions by own time")
    ap.add_argument("--rescore", action="store_true", help="rescore near ties one row a pass (the CPU default)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if not a.rescore:  # as with batch invariance on: no near ties (decide.ties.drift is -inf)
        import typedlm.decide.api as api

        api.near_ties = lambda *_a, **_k: []

    from typedlm.bench.decide import contexts
    from typedlm.decide import decide_many, presets

    engine = tiny_qwen_engine()
    schema = presets.load("support_triage")["schema"]
    ctxs = contexts(engine, a.contexts, a.tokens)
    ds = decide_many(schema, ctxs, engine=engine)  # warm: plan, prefix cache state as in later calls
    walls = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        decide_many(schema, ctxs, engine=engine)
        walls.append(time.perf_counter() - t0)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    decide_many(schema, ctxs, engine=engine)
    prof.disable()
    profiled = time.perf_counter() - t0
    stats = pstats.Stats(prof)
    split = parts(stats, profiled)
    load = os.getloadavg()
    out = {"command": "python " + " ".join(sys.argv), "machine": f"{platform.processor() or platform.machine()}, "
           f"{os.cpu_count()} cores, load average {load[0]:.2f} (shared)", "torch_threads": a.threads,
           "model": engine.name, "contexts": a.contexts, "fields": len(schema.fields),
           "prompt_tokens": sum(d.usage["prompt_tokens"] for d in ds),
           "shared_prefix_tokens": ds[0].usage["shared_prefix_tokens"],
           "rescored_fields": sum(f.score_source == "rescored_one_row" for d in ds for f in d.fields.values()),
           "wall_s": walls, "wall_p50_s": statistics.median(walls), "profiled_wall_s": profiled,
           "parts_s": split, "python_calls": stats.total_calls, "host_s": split["prompts"] + split["trie"] + split["host other"]}
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    print(f"\n| part (cProfile, one call of {a.contexts} contexts) | s | share |\n|---|---:|---:|")
    for k, v in split.items():
        print(f"| {k} | {v:.3f} | {v / profiled:.0%} |")
    print(f"| **host (prompts + trie + other)** | **{out['host_s']:.3f}** | {out['host_s'] / profiled:.0%} |")
    print(f"| wall under cProfile | {profiled:.3f} | |\n| wall p50 of {a.runs}, no profiler | {out['wall_p50_s']:.3f} | |")
    print(f"| Python function calls | {stats.total_calls:,} | |")
    if a.top:
        stats.sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
