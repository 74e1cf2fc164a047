"""The table that chose decide's defaults without a bundle (prior mode, multi set rule): every candidate's
accuracy (multi: exact set) on each bundled dataset's calibration split, from the raw scores the quality
suite stored (``typedlm eval --suite --out DIR``: ``DIR/scores/<dataset>.jsonl``). The test split is not read.

    PYTHONPATH=. python bench/quality_defaults.py bench/results/quality [--cal-limit N]

Candidates: prior none / neutral (``batch`` cannot be a default: ``decide`` on one context has no batch) ×
set rule threshold / count / cardinality (multi fields; the default set-size prior). A candidate *wins* a
field when its accuracy is the field's best (ties: every candidate at the best wins; on scalar fields the set
rule is moot, so every set rule of the best prior wins). Equal counts: the higher mean accuracy over fields.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from typedlm.decide.calibrate import collect as fitting
from typedlm.decide.api import plan_for
from typedlm.decide.cardinality import SET_RULES
from typedlm.decide.options import DecideOptions
from typedlm.engine import load_engine
from typedlm.eval.cases import select
from typedlm.eval.datasets import DATASETS, load

PRIORS = ("none", "neutral")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--cal-limit", type=int, default=None)
    args = ap.parse_args()
    engine = load_engine("default", progress=False)
    cands = [(p, r) for p in PRIORS for r in SET_RULES]
    rows, wins, total = [], {c: 0 for c in cands}, {c: 0.0 for c in cands}
    for name in DATASETS:
        path = args.folder / "scores" / f"{name}.jsonl"
        ids = {json.loads(x)["id"] for x in path.read_text().splitlines()}
        cal = [c for c in select(load(name), "calibration", args.cal_limit) if c.id in ids]
        plan = plan_for(cal[0].schema, engine)
        scored = fitting.collect(engine, plan.schema, cal, path)  # every case is in the file: nothing is scored
        neutral = fitting.neutral_logs(engine, plan)
        acc = {}
        for p, r in cands:
            ds = fitting.decisions(plan, scored, engine.name, DecideOptions(prior=p, set_rule=r), neutral)
            for f in plan.schema.fields:
                hit = [_hit(f.type, c.gold[f.name], d.fields[f.name].value) for c, d in zip(scored, ds)]
                acc.setdefault(f.name, {})[(p, r)] = sum(hit) / len(hit)
        for field, a in acc.items():  # scalar fields: the set rule is moot, so a prior's three columns are equal
            best = max(a.values())
            for c, v in a.items():
                wins[c] += v == best
                total[c] += v
            rows.append((name, field, len(scored), " | ".join(f"{a[c]:.3f}" for c in cands)))
    print("| dataset | field | n cal | " + " | ".join(f"{p} + {r}" for p, r in cands) + " |")
    print("|" + "---|" * (3 + len(cands)))
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")
    print("| **fields won** | | | " + " | ".join(str(wins[c]) for c in cands) + " |")
    print("| mean accuracy (tie-break) | | | " + " | ".join(f"{total[c] / len(rows):.3f}" for c in cands) + " |")


def _hit(ftype, gold, value) -> bool:
    if value is None:
        return False
    return sorted(gold) == sorted(value) if ftype == "multi" else gold == value


if __name__ == "__main__":
    main()
