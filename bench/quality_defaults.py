"""The table that chose decide's defaults without a bundle (prior mode, multi set rule): every candidate's
accuracy (multi: exact set) on each bundled dataset's calibration split, from the raw scores the quality
suite stored (``typedlm eval --suite --out DIR``: ``DIR/scores/<dataset>.jsonl``). The test split is not read.

    PYTHONPATH=. python bench/quality_defaults.py bench/results/quality [--cal-limit N] [--order averaged]

Candidates: prior none / neutral / auto (per field type: :data:`typedlm.decide.prior.AUTO`; ``batch`` cannot be
a default: ``decide`` on one context has no batch) × set rule threshold / count / cardinality (multi fields; the
default set-size prior). A candidate *wins* a field when its accuracy is the field's best (ties: every candidate
at the best wins; on scalar fields the set rule is moot, so every set rule of the best prior wins). Equal counts:
the higher mean accuracy over fields. The last rows count the fields won per field type by none and neutral
alone: the type's winner is what ``auto`` gives that type.
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

PRIORS = ("none", "neutral", "auto")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--cal-limit", type=int, default=None)
    ap.add_argument("--order", default="given")
    args = ap.parse_args()
    engine = load_engine("default", progress=False)
    cands = [(p, r) for p in PRIORS for r in SET_RULES]
    rows, wins, total = [], {c: 0 for c in cands}, {c: 0.0 for c in cands}
    by_type: dict = {}
    for name in DATASETS:
        path = args.folder / "scores" / f"{name}.jsonl"
        views = [path] + ([path.with_name(f"{name}-mirror.jsonl")] if args.order == "averaged" else [])
        ids = set.intersection(*({json.loads(x)["id"] for x in v.read_text().splitlines()} for v in views))
        cal = [c for c in select(load(name), "calibration", args.cal_limit) if c.id in ids]
        plan = plan_for(cal[0].schema, engine)
        # every case is in the files: nothing is scored
        scored = fitting.collect(engine, plan.schema, cal, path, order=args.order)
        neutral = fitting.neutral_logs(engine, plan, args.order)
        acc = {}
        for p, r in cands:
            opts = DecideOptions(prior=p, set_rule=r, order=args.order)
            ds = fitting.decisions(plan, scored, engine.name, opts, neutral)
            for f in plan.schema.fields:
                hit = [_hit(f.type, c.gold[f.name], d.fields[f.name].value) for c, d in zip(scored, ds)]
                acc.setdefault((f.name, f.type), {})[(p, r)] = sum(hit) / len(hit)
        for (field, ftype), a in acc.items():  # scalar fields: the set rule is moot (a prior's columns are equal)
            best = max(a.values())
            for c, v in a.items():
                wins[c] += v == best
                total[c] += v
            plain = max(v for (p, _r), v in a.items() if p != "auto")
            for p in ("none", "neutral"):
                won = any(v == plain for (q, _r), v in a.items() if q == p)
                by_type.setdefault(ftype, {"none": 0, "neutral": 0, "n": 0})[p] += won
            by_type[ftype]["n"] += 1
            rows.append((name, field, len(scored), " | ".join(f"{a[c]:.3f}" for c in cands)))
    print("| dataset | field | n cal | " + " | ".join(f"{p} + {r}" for p, r in cands) + " |")
    print("|" + "---|" * (3 + len(cands)))
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")
    print("| **fields won** | | | " + " | ".join(str(wins[c]) for c in cands) + " |")
    print("| mean accuracy (tie-break) | | | " + " | ".join(f"{total[c] / len(rows):.3f}" for c in cands) + " |")
    print()
    print("| field type | fields | won by prior none | won by prior neutral |")
    print("|---|---|---|---|")
    for ftype, w in sorted(by_type.items()):
        print(f"| {ftype} | {w['n']} | {w['none']} | {w['neutral']} |")


def _hit(ftype, gold, value) -> bool:
    if value is None:
        return False
    return sorted(gold) == sorted(value) if ftype == "multi" else gold == value


if __name__ == "__main__":
    main()
