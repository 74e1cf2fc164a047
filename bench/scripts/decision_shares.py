"""Why a variant loses on a scalar field: the share of each predicted value vs the gold shares, per prior,
on the validation cases of a `typedlm select` folder (scores-k0.jsonl; no model forward except the neutral prior).

    PYTHONPATH=. python bench/scripts/decision_shares.py news-comments 150 runs/eval-r3/news-comments-select
"""

import collections
import sys
from pathlib import Path

from typedlm.engine import load_engine
from typedlm.eval.datasets import load_cases
from typedlm.eval.cases import select
from typedlm.eval.select import PRIORS, Scored, Variant, decide_variant


def main(data: str, n: int, folder: str) -> None:
    name, cases = load_cases(data)
    s = Scored(load_engine("default", progress=False), cases, Path(folder))
    plan, neutral = s.plan(0)
    fit = s.scores(0, select(cases, "calibration", n))
    for f in plan.schema.fields:
        if f.type == "multi":
            continue
        gold = collections.Counter(str(c.gold[f.name]).lower() for c in fit)
        print(f"{name} {f.name} (n={len(fit)}) gold: " + ", ".join(f"{k} {v / len(fit):.2f}" for k, v in gold.most_common()))
        for prior in PRIORS:
            ds, _ = decide_variant(s.engine, plan, fit, fit, Variant(0, prior, False), neutral)
            pred = collections.Counter(str(d.fields[f.name].value).lower() for d in ds)
            acc = sum(str(d.fields[f.name].value).lower() == str(c.gold[f.name]).lower() for d, c in zip(ds, fit))
            print(f"  {prior:>8}: accuracy {acc / len(fit):.3f}; predicted " +
                  ", ".join(f"{k} {v / len(fit):.2f}" for k, v in pred.most_common()))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
