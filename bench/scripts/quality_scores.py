"""Score the quality suite's cases ahead of ``typedlm eval --suite`` (the same resumable files, so the suite
then scores nothing): per dataset its calibration cases, then its test split in blocks of ``--block`` cases,
each block in every view of ``--order`` before the next (a run stopped at any time leaves a prefix of the
seeded test order scored in both views; ``--limit N`` of the suite then reads it).

    OMP_NUM_THREADS=1 PYTHONPATH=. python bench/scripts/quality_scores.py OUT --datasets bbc,bbc-multi \
        --cal-limit 120 --order averaged [--block 200] [--limit N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from typedlm.decide.calibrate import collect as fitting
from typedlm.engine import load_engine
from typedlm.eval.cases import select
from typedlm.eval.datasets import load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--datasets", required=True)
    ap.add_argument("--cal-limit", type=int, default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--order", default="averaged")
    args = ap.parse_args()
    engine = load_engine("default", progress=False)
    (args.out / "scores").mkdir(parents=True, exist_ok=True)
    for name in args.datasets.split(","):
        cases = load(name)
        cal, test = select(cases, "calibration", args.cal_limit), select(cases, "test", args.limit)
        path = args.out / "scores" / f"{name}.jsonl"
        t0 = time.time()
        for k in [0] + list(range(args.block, len(test), args.block)) + [len(test)]:
            fitting.collect(engine, cal[0].schema, cal + test[:k], path, order=args.order)
            print(f"{time.strftime('%H:%M:%S')} {name}: calibration {len(cal)} + test {k}/{len(test)} scored "
                  f"({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
