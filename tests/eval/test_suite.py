"""`typedlm eval --suite` on the tiny model: one table with every variant, flip and naive lines, bundles fitted on
the calibration split."""

import json

from typedlm.decide.calibrate.bundle import CalibrationBundle
from typedlm.eval.runner import read_jsonl
from typedlm.eval.suite import run_suite
from typedlm.eval.suite_table import verdict


def test_suite_on_a_bundled_dataset(tiny, tmp_path):
    s = run_suite(tiny, tmp_path, datasets=("news-comments",), cal_limit=10, test_limit=6, flip_limit=2,
                  naive_limit=2, n_boot=20, command="typedlm eval --suite (test)")
    d = s["datasets"][0]
    assert (d["n_calibration"], d["n_test"], d["n_flip"], d["n_naive"]) == (10, 6, 2, 2)
    fields = ("topics", "comment_sentiment", "has_two_articles")
    for f in fields:
        for key in ("parallel/default", "parallel/calibrated", "naive_local/json"):
            assert f"{key}/{f}" in d["metrics"]
        assert d["metrics"][f"parallel/default/{f}"]["n"] == 6 and d["metrics"][f"naive_local/json/{f}"]["n"] == 2
    flips = d["metrics"]["parallel/calibrated/topics"]["flip_rate"]["value"]
    assert flips is not None and 0.0 <= flips <= 1.0
    lines = read_jsonl(tmp_path / "news-comments" / "predictions.jsonl")
    assert sum(x["permutation"] is not None for x in lines) == 2 * 2 * 2  # 2 cases x 2 variants x 2 permuted fields
    bundle = CalibrationBundle.model_validate_json((tmp_path / "bundles" / "news-comments.json").read_text())
    assert bundle.fit["n_fit"] == 10 and set(bundle.fields) == set(fields)
    table = (tmp_path / "table.md").read_text()
    assert "`typedlm eval --suite (test)`" in table and table.count("| news-comments |") == 3
    assert json.loads((tmp_path / "suite.json").read_text())["datasets"][0]["bundle"] == bundle.id
    again = run_suite(tiny, tmp_path, datasets=("news-comments",), cal_limit=10, test_limit=6, flip_limit=2,
                      naive_limit=2, n_boot=20)  # resumed from its files: the same numbers
    assert again["datasets"][0]["metrics"] == d["metrics"]


def test_verdicts():
    acc = {"value": 0.6, "lo": 0.5, "hi": 0.7}
    assert verdict(acc, {"value": 0.4}, interval=False) == "win"
    assert verdict(acc, {"value": 0.55}, interval=False) == "tie"
    assert verdict(acc, {"value": 0.8}, interval=False) == "loss"
    assert verdict(acc, {"value": 0.45, "lo": 0.3, "hi": 0.52}, interval=True) == "tie"
    assert verdict(acc, {"value": 0.3, "lo": 0.2, "hi": 0.4}, interval=True) == "win"
