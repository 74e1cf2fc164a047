"""The suite's one table (``table.md``): per dataset and field, majority, naive_local, parallel default and
parallel with the calibration-split bundle, with 95 % bootstrap intervals; ECE, flip rate, set sizes.

A verdict against a baseline: ``win`` when the interval lies above it (the majority: a number; naive: above
naive's whole interval), ``loss`` when below, ``tie`` when they overlap.
"""

from __future__ import annotations

from pathlib import Path

COLUMNS = ("dataset", "field", "n test", "majority", "naive_local (n)", "parallel default", "parallel calibrated",
           "rule chosen on calibration (CV acc)", "default vs majority / naive", "calibrated vs majority / naive",
           "ECE default → calibrated (floor)", "flip default / calibrated (n)", "set size default / calibrated / gold")


def _ci(m: dict | None, digits: int = 3) -> str:
    if not m or m.get("value") is None:
        return "–"
    if m.get("lo") is None:
        return f"{m['value']:.{digits}f}"
    return f"{m['value']:.{digits}f} [{m['lo']:.{digits}f}, {m['hi']:.{digits}f}]"


def _num(m: dict | None, digits: int = 3) -> str:
    return "–" if not m or m.get("value") is None else f"{m['value']:.{digits}f}"


def verdict(acc: dict | None, other: dict | None, *, interval: bool) -> str:
    """win / tie / loss of ``acc`` (value, lo, hi) against a baseline (its interval when ``interval``)."""
    if not acc or not other or acc.get("lo") is None or other.get("value") is None:
        return "–"
    lo, hi = (other["lo"], other["hi"]) if interval and other.get("lo") is not None else (other["value"],) * 2
    return "win" if acc["lo"] > hi else "loss" if acc["hi"] < lo else "tie"


def _rule(r: dict) -> str:
    how = f"{r['set_rule']} + {r.get('kind', 'logistic')}" if r.get("set_rule") else r.get("kind", "")
    return f"{r['prior']} + {how} ({r['cv_acc']:.3f})"


def rows(summary: dict) -> list[list[str]]:
    out = []
    for d in summary["datasets"]:
        m = d["metrics"]
        for field in d["fields"]:
            dflt, cal = m.get(f"parallel/default/{field}", {}), m.get(f"parallel/calibrated/{field}", {})
            naive = m.get(f"naive_local/json/{field}", {})
            maj = dflt.get("majority_baseline")
            vs = [" / ".join((verdict(x.get("accuracy"), maj, interval=False),
                              verdict(x.get("accuracy"), naive.get("accuracy"), interval=True))) for x in (dflt, cal)]
            flip = f"{_num(dflt.get('flip_rate'))} / {_num(cal.get('flip_rate'))} ({d['n_flip']})"
            size = "–" if dflt.get("set_size", {}).get("value") is None else \
                f"{_num(dflt['set_size'], 2)} / {_num(cal['set_size'], 2)} / {_num(dflt['gold_set_size'], 2)}"
            out.append([d["dataset"], field, f"{d['n_test']} of {d['n_test_split']}", _num(maj),
                        f"{_ci(naive.get('accuracy'))} ({naive.get('n', 0)})", _ci(dflt.get("accuracy")),
                        _ci(cal.get("accuracy")), _rule(d["rules"][field]), vs[0], vs[1],
                        f"{_num(dflt.get('ece'))} → {_num(cal.get('ece'))} ({_num(cal.get('ece_floor'))})", flip, size])
    return out


def markdown(summary: dict) -> str:
    head = ["# Decision quality: every bundled dataset, four ways", "",
            f"Model {summary['model']}, decide prompt version {summary['prompt_version']}. Commands (limits per dataset: "
            "calibration cases, test cases, test cases also scored permuted for the flip rate, naive_local cases):", ""]
    for d in summary["datasets"]:
        lim = d["limits"]
        head.append(f"- {d['dataset']}: `{d['command']}` (calibration {lim['calibration'] or 'whole split'}, test "
                    f"{lim['test'] or 'whole split'}, flip {lim['flip']}, naive {lim['naive']}, candidate order "
                    f"{lim.get('order', 'given')}; {d['seconds']:.0f} s" + (f"; {d['machine']}" if d.get("machine") else "") + ")")
    head += ["", "Accuracy (multi fields: exact set) with 95 % bootstrap intervals over test cases; verdicts: win / "
             "tie (intervals overlap) / loss against the majority and against naive_local. ECE floor: the ECE a "
             "perfectly calibrated predictor with the calibrated variant's confidences shows on as many cases "
             "(the estimator's own bias; an ECE near it is noise).", ""]
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    table += ["| " + " | ".join(r) + " |" for r in rows(summary)]
    return "\n".join(head + table) + "\n"


def write_table(summary: dict, path: Path) -> None:
    path.write_text(markdown(summary), encoding="utf-8")
