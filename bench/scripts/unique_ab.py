"""Decode speed with and without ``uniqueItems`` in one process, runs interleaved (A B A B ...), so that a
shared machine's drift hits both alike: ``bench gen``'s schema (an array of ``{name, qty}`` objects: strings
in a unique array) vs the same schema with ``uniqueItems: true`` (the decode-time guard). Each pair's ratio
is taken in tokens per wall second and in tokens per CPU second of the process; ``best``: the fastest run of
each mode (on a shared machine, the least disturbed).

    PYTHONPATH=$PWD python bench/scripts/unique_ab.py --pairs 7 --batch 1 --batch 8 --max-tokens 128 \\
        --json bench/results/gen-unique-items-ab-cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from typedlm.bench.gen import PROMPT, SCHEMA, load_subject, run_typedlm, unique_schema
from typedlm.grammar.spec import make_constraint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="tiny")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--batch", type=int, action="append")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--json")
    args = ap.parse_args()
    engine = load_subject(args.arch, "cpu", None)
    ids = engine.encode_prompt(messages=[{"role": "user", "content": PROMPT}]) if engine.chat.has_template \
        else engine.encode_prompt(prompt=PROMPT)
    modes = {"plain": make_constraint(json_schema=SCHEMA, any_whitespace=False),
             "unique": make_constraint(json_schema=unique_schema(), any_whitespace=False)}
    for c in modes.values():
        engine.grammars.compile(c)
        run_typedlm(engine, ids, 1, 4, c)  # warm-up: kernels, allocator, grammar path
    rows = []
    for b in args.batch or [1, 8]:
        runs = {m: [] for m in modes}
        for _ in range(args.pairs):
            for m, c in modes.items():
                cpu = time.process_time()
                runs[m].append(run_typedlm(engine, ids, b, args.max_tokens, c))
                runs[m][-1]["cpu_s"] = time.process_time() - cpu
        ratios = [u["tok_s"] / p["tok_s"] for p, u in zip(runs["plain"], runs["unique"])]
        # the same ratio in CPU seconds per token (the process's, every thread): less moved by other jobs
        cpu = [(p["cpu_s"] / p["tokens"]) / (u["cpu_s"] / u["tokens"]) for p, u in zip(runs["plain"], runs["unique"])]
        rows.append({"batch": b, **{f"{m}_tok_s": [r["tok_s"] for r in rs] for m, rs in runs.items()},
                     **{f"{m}_tokens": [r["tokens"] for r in rs] for m, rs in runs.items()},
                     "unique_over_plain": [round(x, 3) for x in ratios],
                     "median_unique_over_plain": round(statistics.median(ratios), 3),
                     "cpu_unique_over_plain": [round(x, 3) for x in cpu],
                     "median_cpu_unique_over_plain": round(statistics.median(cpu), 3),
                     # the fastest run of each (the one other jobs disturbed least)
                     "best_unique_over_plain": round(max(r["tok_s"] for r in runs["unique"])
                                                     / max(r["tok_s"] for r in runs["plain"]), 3)})
        print(json.dumps(rows[-1]), flush=True)
    out = {"bench": "unique-items A/B", "arch": args.arch, "device": "cpu", "machine": platform.processor() or platform.machine(),
           "pairs": args.pairs, "max_tokens": args.max_tokens, "rows": rows}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
