"""The issue-23 table from `typedlm select` folders (each already through `typedlm report FOLDER`): per field,
the test accuracy of the default and of the variant chosen on validation, the majority baseline, and the paired
difference to naive_local on the test cases both answered.

    PYTHONPATH=. python bench/scripts/select_table.py runs/eval-r3/*-select > runs/eval-r3/table.md
"""

import json
import sys
from pathlib import Path


def fmt(m: dict | None, d: int = 3) -> str:
    if not m or m.get("value") is None:
        return "–"
    return f"{m['value']:.{d}f}" + (f" [{m['lo']:.{d}f}, {m['hi']:.{d}f}]" if m.get("lo") is not None else "")


def main(folders: list[str]) -> None:
    print("| dataset | field | chosen on validation | n test | majority | default (k0+neutral) | chosen | "
          "n shared with naive | naive | chosen − naive (paired) | default − naive (paired) | set size chosen / default / naive / gold |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for folder in map(Path, folders):
        sel = json.loads((folder / "selection.json").read_text())
        rep = json.loads((folder / "report.json").read_text())
        rows = {(r["track"], r["mode"], r["field"]): r["metrics"] for r in rep["rows"]}
        comps = {(c["a"], c["field"]): c for c in rep["comparisons"]}
        for field in sel["test"]["default"]["fields"]:
            d, c = rows[("parallel", "default", field)], rows[("parallel", "selected", field)]
            nv = rows.get(("naive_local", "json", field))
            cs, cd = comps.get(("parallel/selected", field)), comps.get(("parallel/default", field))
            size = "–"
            if d["set_size"]["value"] is not None:
                size = " / ".join(f"{m['set_size']['value']:.2f}" if m else "–" for m in (c, d, nv)) \
                    + f" / {c['gold_set_size']['value']:.2f}"
            print(f"| {sel['dataset']} | {field} | {sel['chosen']} | {c['n']} | {c['majority_baseline']['value']:.3f} | "
                  f"{fmt(d['accuracy'])} | {fmt(c['accuracy'])} | {cs['cases'] if cs else '–'} | "
                  f"{fmt(nv['accuracy']) if nv else '–'} | {fmt(cs['accuracy_diff']) if cs else '–'} | "
                  f"{fmt(cd['accuracy_diff']) if cd else '–'} | {size} |")


if __name__ == "__main__":
    main(sys.argv[1:])
