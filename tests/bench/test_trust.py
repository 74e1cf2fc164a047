"""`typedlm bench trust` on the tiny model: every variant in one eval report; the constrained variant never
violates its constraints."""

import json
import random

from typer.testing import CliRunner

from typedlm.cli import app

SCHEMA = {"description": "Topics.", "fields": {"topics": {"type": "multi", "description": "Which topics?",
                                                          "choices": ["sport", "tech", "politics", "business"],
                                                          "nullable": False}}}


def test_bench_trust_on_tiny(tiny_dir, tmp_path):
    rng = random.Random(1)
    lines = []
    for i in range(12):
        gold = sorted(rng.sample(SCHEMA["fields"]["topics"]["choices"], rng.choice((1, 2, 3))))
        lines.append({"id": f"c{i}", "schema": SCHEMA, "context": f"News about {' and '.join(gold)} number {i}.",
                      "labels": {"topics": gold}, "split": "calibration" if i < 6 else "test"})
    data = tmp_path / "multi.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "trust"
    r = CliRunner().invoke(app, ["bench", "trust", "--data", str(data), "--out", str(out), "--model", str(tiny_dir),
                                 "--fit-limit", "6", "--test-limit", "6", "--batch", "3", "--bootstrap", "20"])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())[0]
    modes = set(summary["variants"])
    assert modes == {"labels", "labels+cal", "labels+neutral", "labels+neutral+cal", "labels+batch",
                     "labels+batch+cal", "labels+constrained"}
    assert summary["variants"]["labels+constrained"]["cases_outside_1_3_topics"] == 0
    rep = json.loads((out / "report.json").read_text())
    assert {row["mode"] for row in rep["rows"]} == modes and all(row["metrics"]["n"] == 6 for row in rep["rows"])
    assert any(p.name.startswith("reliability-") for p in out.iterdir())
    preds = [json.loads(x) for x in (out / "multi" / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 6 * len(modes)
