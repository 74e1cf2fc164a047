"""`typedlm select` on the tiny model: every variant scored on validation cases only, the best one applied to the
test split beside the default; the choice does not look at the test labels."""

import json
import random

from typer.testing import CliRunner

from typedlm.cli import app
from typedlm.eval.select import DEFAULT, variants

SCHEMA = {"description": "News.", "fields": {
    "topics": {"type": "multi", "description": "Which topics?", "choices": ["sport", "tech", "politics"],
               "nullable": False},
    "tone": {"type": "enum", "description": "Tone?", "choices": ["calm", "angry"], "nullable": False},
    "local": {"type": "boolean", "description": "Local news?", "nullable": False}}}


def cases(path, seed_test: int):
    rng, lines = random.Random(1), []
    for i, split in enumerate(["train"] * 3 + ["calibration"] * 12 + ["test"] * 5):
        r = random.Random(seed_test * 100 + i) if split == "test" else rng
        gold = sorted(r.sample(["sport", "tech", "politics"], r.choice((1, 2))))
        tone = r.choice(["calm", "angry"])
        lines.append({"id": f"c{i}", "schema": SCHEMA, "context": f"A {tone} story on {' and '.join(gold)} ({i}).",
                      "labels": {"topics": gold, "tone": tone, "local": i % 2 == 0}, "split": split})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def run(tiny_dir, data, out):
    r = CliRunner().invoke(app, ["select", "--data", str(data), "--out", str(out), "--model", str(tiny_dir),
                                 "--fit-limit", "12", "--test-limit", "5", "--examples", "0,2"])
    assert r.exit_code == 0, r.output
    return json.loads((out / "selection.json").read_text())


def test_select_chooses_on_validation_only(tiny_dir, tmp_path):
    a = run(tiny_dir, cases(tmp_path / "a.jsonl", 1), tmp_path / "a")
    rows = a["validation"]
    assert [r["variant"] for r in rows] == [v.name for v in variants([0, 2])] and len(rows) == 12
    best = max(r["score"] for r in rows)
    assert a["chosen"] == next(r["variant"] for r in rows if r["score"] == best)
    assert a["test"]["default"]["variant"] == DEFAULT.name and a["test"]["selected"]["variant"] == a["chosen"]
    for r in rows:  # the criterion: mean over fields of the field's accuracy (multi: exact set)
        assert abs(r["score"] - sum(r["fields"].values()) / 3) < 1e-12
    # other test labels: the same validation table and choice (test cases are scored only after choosing)
    b = run(tiny_dir, cases(tmp_path / "b.jsonl", 2), tmp_path / "b")
    assert b["validation"] == rows and b["chosen"] == a["chosen"]
    preds = [json.loads(x) for x in (tmp_path / "a" / "predictions.jsonl").read_text().splitlines()]
    assert {(p["mode"], p["split"]) for p in preds} == {("default", "test"), ("selected", "test")}
    assert len(preds) == 2 * 5 * 3
    r = CliRunner().invoke(app, ["report", str(tmp_path / "a"), "--bootstrap", "20"])
    assert r.exit_code == 0, r.output


def test_select_refuses_without_the_default(tiny_dir, tmp_path):
    r = CliRunner().invoke(app, ["select", "--data", str(cases(tmp_path / "a.jsonl", 1)), "--out", str(tmp_path / "o"),
                                 "--model", str(tiny_dir), "--examples", "2"])
    assert r.exit_code == 2 and "--examples must include 0" in r.output


def test_eval_examples_beyond_the_train_split_is_a_named_error(tiny_dir, tmp_path):
    data = cases(tmp_path / "a.jsonl", 1)  # 3 train cases
    for k, msg in (("4", "--examples 4: the train split has 3 cases"), ("-1", "--examples must be at least 0")):
        r = CliRunner().invoke(app, ["eval", "--data", str(data), "--track", "parallel", "--modes", "labels",
                                     "--no-flip", "--examples", k, "--out", str(tmp_path / f"o{k}"),
                                     "--model", str(tiny_dir), "--quiet"])
        assert r.exit_code == 2 and msg in r.output, r.output
