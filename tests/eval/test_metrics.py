"""Metrics and reports on hand-made prediction lines with answers worked out by hand."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from typedlm.cli import app
from typedlm.eval.metrics import compute, groups_from_lines, paired, summarize

CH = ["a", "b", "c"]


def line(case, gold, pred, probs, *, track="parallel", mode="labels", perm=None, lat=1.0, ftype="enum",
         choices=CH, violation=False, field="f"):
    return {"run_id": "r", "track": track, "mode": mode, "case_id": case, "group_id": case, "dataset": "d",
            "split": "test", "field": field, "field_type": ftype, "choices": choices, "gold": gold, "pred": pred,
            "probabilities": probs, "scores": None,
            "correct": (sorted(gold) == sorted(pred or [])) if ftype == "multi" else gold == pred,
            "legal_mass": 1.0, "latency_s": lat, "case_latency_s": lat, "permutation": perm, "truncated": False,
            "violation": violation, "error": None}


def onehot(c):
    return {k: float(k == c) for k in CH}


def scalar_lines():
    # gold a a b c, pred a b b b (one-hot, confidence 1): acc 0.5
    golds, preds = ["a", "a", "b", "c"], ["a", "b", "b", "b"]
    out = [line(f"k{i}", g, p, onehot(p), lat=float(i + 1)) for i, (g, p) in enumerate(zip(golds, preds))]
    out += [line("k0", "a", "a", onehot("a"), perm=["c", "b", "a"]),  # same answer
            line("k1", "a", "c", onehot("c"), perm=["b", "a", "c"])]  # flipped
    return out


def test_scalar_metrics_by_hand():
    g = groups_from_lines(scalar_lines())[("parallel", "labels", "f")]
    m = compute(g, np.arange(g.n))
    assert m["accuracy"] == 0.5
    assert m["balanced_accuracy"] == pytest.approx((1 / 2 + 1 + 0) / 3)  # recall a, b, c
    assert m["macro_f1"] == pytest.approx((2 / 3 + 2 / 4 + 0) / 3)  # F1 a = 2/3, b = 2·1/(2+2+0), c = 0
    assert m["majority_baseline"] == 0.5
    assert m["ece"] == pytest.approx(0.5)  # every answer at confidence 1, half right
    assert m["brier"] == pytest.approx((0 + 2 + 0 + 2) / 4)
    assert m["flip_rate"] == 0.5 and m["violation_rate"] == 0.0
    assert m["latency_p50_s"] == 2.5 and m["decisions_per_s"] == pytest.approx(4 / 10)


def test_ece_of_calibrated_and_overconfident_answers():
    probs = {"a": 0.8, "b": 0.1, "c": 0.1}
    calibrated = [line(f"k{i}", "a" if i < 8 else "b", "a", probs) for i in range(10)]
    g = groups_from_lines(calibrated)[("parallel", "labels", "f")]
    assert compute(g, np.arange(10))["ece"] == pytest.approx(0.0)
    over = [line(f"k{i}", "a" if i < 5 else "b", "a", probs) for i in range(10)]
    g = groups_from_lines(over)[("parallel", "labels", "f")]
    assert compute(g, np.arange(10))["ece"] == pytest.approx(0.3)


def test_multi_metrics_by_hand():
    opts = ["x", "y"]
    lines = [line("m0", ["x"], ["x"], {"x": 0.9, "y": 0.2}, ftype="multi", choices=opts),
             line("m1", ["x", "y"], ["x"], {"x": 0.7, "y": 0.4}, ftype="multi", choices=opts),
             line("m2", [], ["y"], {"x": 0.1, "y": 0.6}, ftype="multi", choices=opts, violation=True)]
    g = groups_from_lines(lines)[("parallel", "labels", "f")]
    m = compute(g, np.arange(3))
    assert m["accuracy"] == pytest.approx(1 / 3)  # exact set match
    # option x: tp 2, tn 1 -> F1 1, balanced 1; option y: tp 0 fp 1 fn 1 tn 1 -> F1 0, balanced (0 + 1/2) / 2
    assert m["macro_f1"] == pytest.approx(0.5) and m["balanced_accuracy"] == pytest.approx((1 + 0.25) / 2)
    assert m["brier"] == pytest.approx(np.mean([0.01, 0.04, 0.09, 0.36, 0.01, 0.36]))
    assert m["majority_baseline"] == pytest.approx(1 / 3) and m["violation_rate"] == pytest.approx(1 / 3)


def test_bootstrap_intervals_and_paired_comparison():
    lines = [line(f"k{i}", "a", "a" if i % 4 else "b", onehot("a" if i % 4 else "b"), lat=0.1) for i in range(40)]
    lines += [line(f"k{i}", "a", "a" if i % 2 else "b", onehot("a"), track="naive_local", mode="json", lat=0.5)
              for i in range(40)]
    gs = groups_from_lines(lines)
    s = summarize(gs[("parallel", "labels", "f")], n_boot=300, seed=1)
    acc = s["accuracy"]
    assert acc["value"] == 0.75 and acc["lo"] < 0.75 < acc["hi"] and acc["hi"] - acc["lo"] < 0.5
    assert s["n"] == 40 and s["flip_rate"]["value"] is None
    c = paired(gs[("parallel", "labels", "f")], gs[("naive_local", "json", "f")], n_boot=300)
    assert c["cases"] == 40 and c["accuracy_diff"]["value"] == pytest.approx(0.25)
    assert c["speedup"]["value"] == pytest.approx(5.0) and c["speedup"]["lo"] == pytest.approx(5.0)


def test_report_files_from_run_folders(tmp_path):
    runs = []
    for name, lines in (("one", scalar_lines()),
                        ("two", [line(f"k{i}", "a", "a", {"a": 0.6, "b": 0.3, "c": 0.1}) for i in range(6)]
                         + [line(f"k{i}", "a", "b" if i else None, onehot("b") if i else None, track="naive_local",
                                 mode="json", violation=not i) for i in range(6)])):
        d = tmp_path / name
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"run_id": name, "dataset": "d", "split": "test", "status": "done",
                                                "cases": 6, "cases_finished": 6, "skipped": [], "model": "m",
                                                "provenance": {"command": "typedlm eval ..."}}))
        (d / "predictions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        runs.append(str(d))
    out = tmp_path / "report"
    r = CliRunner().invoke(app, ["report", *runs, "--out", str(out), "--bootstrap", "50"])
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "report.json").read_text())
    assert [(x["run"], x["track"]) for x in rep["rows"]] == [("one", "parallel"), ("two", "parallel"),
                                                             ("two", "naive_local")]
    assert rep["rows"][2]["metrics"]["violation_rate"]["value"] == pytest.approx(1 / 6)
    assert rep["comparisons"][0]["a"] == "parallel/labels" and rep["comparisons"][0]["accuracy_diff"]["value"] == 1.0
    md = (out / "report.md").read_text()
    assert "| two | naive_local/json | f | 6 | 0.000" in md
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["accuracy-latency.png", "confusion-one-parallel-labels-f.png", "confusion-two-naive_local-json-f.png",
                    "confusion-two-parallel-labels-f.png", "reliability-one-parallel-labels.png",
                    "reliability-two-parallel-labels.png"]
    assert all((out / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    bad = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert bad.exit_code == 2 and "not a run folder" in bad.output


def test_a_field_with_different_choices_across_cases_is_an_error():
    from typedlm.errors import TypedLMError

    lines = [line("k0", "a", "a", onehot("a")), line("k1", "x", "x", {"x": 1.0, "y": 0.0}, choices=["x", "y"])]
    with pytest.raises(TypedLMError, match="field 'f' .* has different choices across cases"):
        groups_from_lines(lines)
