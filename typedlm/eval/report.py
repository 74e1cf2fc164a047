"""``typedlm report RUN…``: report.md + report.json + PNG plots (matplotlib, Agg) for one or more runs.

Plots: a reliability diagram per run and track/mode (``reliability-<run>-<track>-<mode>.png``), accuracy vs
p50 case latency for every run and track/mode (``accuracy-latency.png``), a confusion matrix per run,
track/mode and field (``confusion-…png``; multi fields: gold option × predicted option co-occurrence).
``report.json``: ``{"runs": [{"folder", "run_id", "dataset", "status", "model", ...}], "rows": [{"run",
"dataset", "track", "mode", "field", "field_type", "metrics": {name: {"value", "lo", "hi"}, "n"}}],
"comparisons": [{"run", "dataset", "a", "b", "cases", "accuracy_diff", "speedup"}]}``.
"""

from __future__ import annotations

import json
from pathlib import Path
import re

import numpy as np

from ..errors import TypedLMError
from .metrics import Group, groups_from_lines, paired, reliability_bins, summarize
from .runner import read_jsonl

MD_METRICS = (("accuracy", "acc", 3), ("balanced_accuracy", "bal acc", 3), ("macro_f1", "macro-F1", 3),
              ("majority_baseline", "majority", 3), ("ece", "ECE", 3), ("brier", "Brier", 3),
              ("flip_rate", "flip", 3), ("violation_rate", "violations", 3), ("truncation_rate", "truncated", 3),
              ("set_size", "set size", 2), ("gold_set_size", "gold size", 2), ("latency_p50_s", "p50 s", 3),
              ("latency_p95_s", "p95 s", 3), ("decisions_per_s", "dec/s", 2))


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", s).strip("-")


def load_run(folder: Path) -> tuple[dict, list[dict]]:
    folder = Path(folder)
    meta_path = folder / "run.json"
    if not meta_path.exists():
        raise TypedLMError(f"{folder} is not a run folder (no run.json)")
    meta = json.loads(meta_path.read_text())
    lines = read_jsonl(folder / "predictions.jsonl")
    if not lines:
        raise TypedLMError(f"{folder} has no predictions")
    return meta, lines


def _fmt(m: dict, digits: int) -> str:
    v = m.get("value")
    if v is None:
        return "–"
    if m.get("lo") is None:
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{m['lo']:.{digits}f}, {m['hi']:.{digits}f}]"


def write_report(folders: list[Path], out: Path, *, n_boot: int = 1000, seed: int = 0) -> list[Path]:
    import matplotlib  # optional extra: eval

    matplotlib.use("Agg")
    out.mkdir(parents=True, exist_ok=True)
    runs, rows, comps, groups_all = [], [], [], []
    for folder in folders:
        meta, lines = load_run(folder)
        name = _slug(Path(folder).resolve().name)
        runs.append({"folder": str(folder), "name": name, "run_id": meta.get("run_id"), "dataset": meta.get("dataset"),
                     "split": meta.get("split"), "status": meta.get("status"), "reason": meta.get("reason"),
                     "cases": meta.get("cases"), "cases_finished": meta.get("cases_finished"),
                     "skipped": len(meta.get("skipped") or []), "model": meta.get("model"),
                     "model_sha256": meta.get("model_sha256"), "provenance": meta.get("provenance"),
                     "command": (meta.get("provenance") or {}).get("command")})
        groups = groups_from_lines(lines)
        for key, g in groups.items():
            rows.append({"run": name, "dataset": meta.get("dataset"), "track": key[0], "mode": key[1],
                         "field": key[2], "field_type": g.field_type, "metrics": summarize(g, n_boot=n_boot, seed=seed)})
            groups_all.append((name, g))
        for key, g in groups.items():  # every parallel mode vs naive_local, same field
            if key[0] != "parallel":
                continue
            other = groups.get(("naive_local", "json", key[2]))
            if other is not None:
                c = paired(g, other, n_boot=n_boot, seed=seed)
                if c:
                    comps.append({"run": name, "dataset": meta.get("dataset"), "field": key[2],
                                  "a": f"parallel/{key[1]}", "b": "naive_local/json", **c})
    paths = [out / "report.json", out / "report.md"]
    paths[0].write_text(json.dumps({"runs": runs, "rows": rows, "comparisons": comps, "bootstrap": n_boot,
                                    "seed": seed}, indent=2, ensure_ascii=False) + "\n")
    pngs = _plots(groups_all, rows, out)
    paths[1].write_text(_markdown(runs, rows, comps, pngs, out, n_boot))
    return paths + pngs


def _markdown(runs, rows, comps, pngs, out: Path, n_boot: int) -> str:
    lines = ["# Decision evaluation report", "",
             f"Values with 95 % bootstrap intervals ({n_boot} resamples of the cases). Latency is per case "
             "(the call(s) answering it); `dec/s` = field decisions per second.", "", "## Runs", "",
             "| run | dataset | split | cases | status | skipped | model | command |", "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        status = r["status"] + (f" ({r['reason']})" if r.get("reason") else "")
        lines.append(f"| {r['name']} | {r['dataset']} | {r['split']} | {r['cases_finished']}/{r['cases']} | {status} "
                     f"| {r['skipped']} | {r['model']} | `{r['command']}` |")
    lines += ["", "## Metrics", "", "| run | track/mode | field | n | " + " | ".join(h for _, h, _ in MD_METRICS) + " |",
              "|---|---|---|---|" + "---|" * len(MD_METRICS)]
    for r in rows:
        m = r["metrics"]
        lines.append(f"| {r['run']} | {r['track']}/{r['mode']} | {r['field']} | {m['n']} | "
                     + " | ".join(_fmt(m[k], d) for k, _, d in MD_METRICS) + " |")
    if comps:
        lines += ["", "## parallel vs naive_local (paired, same cases)", "",
                  "| run | field | a | b | cases | accuracy a − b | speedup (b seconds / a seconds) |",
                  "|---|---|---|---|---|---|---|"]
        for c in comps:
            lines.append(f"| {c['run']} | {c['field']} | {c['a']} | {c['b']} | {c['cases']} | "
                         f"{_fmt(c['accuracy_diff'], 3)} | {_fmt(c['speedup'], 1)} |")
    lines += _targets(rows, comps)
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.relative_to(out)})" for p in pngs]
    return "\n".join(lines) + "\n"


def _targets(rows, comps) -> list[str]:
    """The issue's targets, judged on the interval: met (whole interval on the right side), not met (whole
    interval on the wrong side) or undecided."""
    def judge(m: dict, ok) -> str:
        if m.get("value") is None:
            return "–"
        if m.get("lo") is None:
            return "met" if ok(m["value"]) else "not met"
        return "met" if ok(m["lo"]) and ok(m["hi"]) else "not met" if not ok(m["lo"]) and not ok(m["hi"]) else \
            "undecided (interval straddles)"
    out = ["", "## Targets", "", "| run | target | value [95 % interval] | verdict |", "|---|---|---|---|"]
    for c in comps:
        if c["a"] != "parallel/labels":
            continue
        out.append(f"| {c['run']} | parallel accuracy ≥ naive (difference ≥ 0) | {_fmt(c['accuracy_diff'], 3)} "
                   f"| {judge(c['accuracy_diff'], lambda x: x >= 0)} |")
        out.append(f"| {c['run']} | parallel ≥ 5× faster | {_fmt(c['speedup'], 2)} | {judge(c['speedup'], lambda x: x >= 5)} |")
    for r in rows:
        if (r["track"], r["mode"]) == ("parallel", "labels") and r["metrics"]["flip_rate"]["value"] is not None:
            m = r["metrics"]["flip_rate"]
            out.append(f"| {r['run']} | flip rate ≤ 5 % (labels, {r['field']}) | {_fmt(m, 3)} "
                       f"| {judge(m, lambda x: x <= 0.05)} |")
    return out if len(out) > 5 else []


def _plots(groups_all: list[tuple[str, Group]], rows, out: Path) -> list[Path]:
    import matplotlib.pyplot as plt  # optional extra: eval

    paths = []
    by_track: dict = {}
    for run, g in groups_all:
        by_track.setdefault((run, g.key[0], g.key[1]), []).append(g)
    for (run, track, mode), gs in by_track.items():
        if track == "naive_local":
            continue  # no probabilities: every answer has confidence 1
        fig, ax = plt.subplots(figsize=(4.2, 4.2))
        ax.plot([0, 1], [0, 1], "--", color="grey", lw=1, label="perfect calibration")
        for g in gs:
            conf, acc, cnt = reliability_bins(g)
            ok = cnt > 0
            ax.plot(conf[ok], acc[ok], "o-", label=f"{g.key[2]} (n={int(cnt.sum())})")
            for x, y, c in zip(conf[ok], acc[ok], cnt[ok]):
                ax.annotate(str(int(c)), (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy",
               title=f"{run}\n{track}/{mode}")
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        p = out / f"reliability-{_slug(run)}-{track}-{mode}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for r in rows:
        m = r["metrics"]
        acc, lat = m["accuracy"], m["latency_p50_s"]
        ax.errorbar([lat["value"]], [acc["value"]], yerr=[[acc["value"] - acc["lo"]], [acc["hi"] - acc["value"]]],
                    xerr=[[lat["value"] - lat["lo"]], [lat["hi"] - lat["value"]]], fmt="o", capsize=3,
                    label=f"{r['run']} {r['track']}/{r['mode']} {r['field']}")
    ax.set(xscale="log", xlabel="p50 case latency (s, log)", ylabel="accuracy", title="accuracy vs latency")
    ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    p = out / "accuracy-latency.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    for run, g in groups_all:
        paths.append(_confusion(g, run, out, plt))
    return paths


def _confusion(g: Group, run: str, out: Path, plt) -> Path:
    k = len(g.choices)
    if g.multi:
        cm = g.gold.astype(int).T @ g.pred.astype(int)
        cols, xlabel = list(g.choices), "predicted option (co-occurrence with gold option)"
    else:
        cm = np.zeros((k, k + 1), dtype=int)
        np.add.at(cm, (g.gold, np.where(g.pred < 0, k, g.pred)), 1)
        cols, xlabel = list(g.choices) + ["(none)"], "predicted"
        if not cm[:, k].any():
            cm, cols = cm[:, :k], cols[:k]
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * len(cols), 1.2 + 0.55 * k))
    ax.imshow(cm, cmap="Blues")
    for i in range(cm.shape[0]):
        for j in range(cm.shape[1]):
            ax.text(j, i, str(cm[i, j]), ha="center", va="center", fontsize=7,
                    color="white" if cm[i, j] > cm.max() / 2 else "black")
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(k), g.choices, fontsize=7)
    ax.set(xlabel=xlabel, ylabel="gold", title=f"{run} {g.key[0]}/{g.key[1]} {g.key[2]}")
    ax.title.set_fontsize(8)
    fig.tight_layout()
    p = out / f"confusion-{_slug(run)}-{g.key[0]}-{g.key[1]}-{_slug(g.key[2])}.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
