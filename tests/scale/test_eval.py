"""``typedlm eval --ray``: the cases over 2 actors of the tiny model give the same predictions, journal and run
status as the single-process run. Skipped only where ray is not installed."""

import json

import pytest

ray = pytest.importorskip("ray")

from typer.testing import CliRunner  # noqa: E402

from typedlm.cli import app  # noqa: E402
from typedlm.eval.runner import read_jsonl  # noqa: E402
from typedlm.scale.cluster import cluster  # noqa: E402

pytestmark = pytest.mark.ray

SCHEMA = {"description": "Triage a message.",
          "fields": {"topic": {"type": "enum", "description": "Topic?", "choices": ["billing", "login", "other"]},
                     "urgent": {"type": "boolean", "description": "Is it urgent?"}}}
TEXTS = ["I was charged twice, refund me.", "The app crashes when I log in.", "Win a free cruise now!!!",
         "Cannot reset my password.", "Where is my invoice?", "Love the product."]


@pytest.fixture(scope="module")
def local_ray():
    with cluster(num_cpus=2):  # a local 2-CPU cluster, stopped after
        yield


def by_key(folder):
    return {(ln["case_id"], ln["track"], ln["mode"], ln["field"], json.dumps(ln["permutation"])): ln
            for ln in read_jsonl(folder / "predictions.jsonl")}


def test_eval_with_ray_gives_the_same_predictions(local_ray, tiny_dir, tmp_path):
    cases = [{"id": f"c{i}", "schema": SCHEMA, "context": f"{t} (#{i})", "split": "test",
              "labels": {"topic": ["billing", "login", "other"][i % 3], "urgent": i % 2 == 0}}
             for i, t in enumerate(TEXTS)]
    cases.append({"id": "bad", "schema": SCHEMA, "context": " ", "split": "test",
                  "labels": {"topic": "billing", "urgent": True}})
    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in cases))
    args = ["eval", "--data", str(data), "--track", "parallel,naive_local", "--modes", "labels", "--model",
            str(tiny_dir), "--device", "cpu", "--quiet"]
    runner = CliRunner()
    r1 = runner.invoke(app, args + ["--out", str(tmp_path / "one")])
    r2 = runner.invoke(app, args + ["--out", str(tmp_path / "ray"), "--ray", "--replicas", "2"])
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    from ray._private.state import actors

    assert sum(a["ActorClassName"] == "EvalActor" for a in actors().values()) == 2  # the cases went to 2 actors
    one, two = by_key(tmp_path / "one"), by_key(tmp_path / "ray")
    assert set(one) == set(two) and len(two) == len(read_jsonl(tmp_path / "ray" / "predictions.jsonl"))
    for k, a in one.items():
        b = two[k]
        assert (a["pred"], a["correct"], a["gold"]) == (b["pred"], b["correct"], b["gold"]), k
        for c, p in a["probabilities"].items():
            assert b["probabilities"][c] == pytest.approx(p, abs=1e-4), (k, c)
    journal = read_jsonl(tmp_path / "ray" / "journal.jsonl")
    assert sorted(e["case_id"] for e in journal) == sorted(c["id"] for c in cases)  # each case once
    assert [e["status"] for e in journal if e["case_id"] == "bad"] == ["skipped"]
    status = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert status["status"] == "done" and status["cases_finished"] == len(cases)
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert manifest["tracks"] == json.loads((tmp_path / "one" / "manifest.json").read_text())["tracks"]


def test_eval_ray_refuses_the_openai_track(local_ray, tmp_path):
    from typedlm.eval.tracks import OpenAITrack
    from typedlm.scale.cluster import ScaleError
    from typedlm.scale.eval import ray_answerer

    with pytest.raises(ScaleError, match="run \\['openai'\\] without --ray"):
        ray_answerer([OpenAITrack("http://127.0.0.1:9")], model="x", device="cpu", replicas=2)
