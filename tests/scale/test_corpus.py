"""Scale-out on Ray Data (typedlm.scale): a local 2-CPU cluster, 2 actors of the tiny random model.

Skipped only where ray is not installed (`make test` installs it through the dev extra)."""

import json
import os
import signal

import pytest

ray = pytest.importorskip("ray")

from typer.testing import CliRunner  # noqa: E402

from typedlm.cli import app  # noqa: E402
from typedlm.decide.api import decide_many  # noqa: E402
from typedlm.decide.records import decision_line  # noqa: E402
from typedlm.errors import TypedLMError  # noqa: E402
from typedlm.scale import decide_dataset  # noqa: E402
from typedlm.scale.cluster import ScaleError, cluster  # noqa: E402

pytestmark = pytest.mark.ray

SCHEMA = {"fields": {
    "sentiment": {"type": "enum", "description": "The customer's mood", "choices": ["positive", "negative", "neutral"]},
    "urgent": {"type": "boolean", "description": "Does it need an answer today?"},
    "topics": {"type": "multi", "description": "What it is about", "choices": ["delivery", "billing", "app"]},
}}
TEXTS = ["The delivery was late and the box was crushed.", "Great product, works as described!",
         "I want a refund now.", "Where is my order? It has been two weeks.", "The app crashes when I log in.",
         "Thanks for the quick help!", "Charged twice for one purchase.", "Can I change my shipping address?"]
BAD = [{"id": "empty", "context": "  "}, {"id": "number", "context": 5}]


def corpus(n: int) -> list[dict]:
    """Ids of both kinds (strings and integers); every context distinct."""
    return [{"id": i if i % 3 == 0 else f"t{i}", "context": f"{TEXTS[i % len(TEXTS)]} (ticket {i})"} for i in range(n)]


def write_jsonl(path, rows, extra_lines=()):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(x + "\n" for x in extra_lines))
    return path


@pytest.fixture(scope="module")
def local_ray():
    with cluster(num_cpus=2) as started:  # a local 2-CPU cluster, stopped after
        yield started


def reference(tiny, rows) -> dict:
    """Single-process decide_many, the line `typedlm decide --output` writes, by id."""
    ds = decide_many(SCHEMA, [r["context"] for r in rows], engine=tiny)
    return {r["id"]: json.loads(decision_line(r["id"], d)) for r, d in zip(rows, ds)}


def read_out(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_same_decisions(got: list[dict], want: dict):
    ids = [g["id"] for g in got]
    assert sorted(map(str, ids)) == sorted(map(str, want)), "every id exactly once"
    for g in got:
        w = want[g["id"]]
        assert set(g) == set(w)
        assert g["value"] == w["value"], g["id"]
        for name, f in g["fields"].items():
            for k, p in f["probabilities"].items():
                assert p == pytest.approx(w["fields"][name]["probabilities"][k], abs=1e-4), (g["id"], name, k)


def test_corpus_on_two_actors_equals_single_process(local_ray, tiny, tiny_dir, tmp_path):
    rows = corpus(20)
    inp = write_jsonl(tmp_path / "in.jsonl", rows + BAD, ["not json", json.dumps({"context": "no id"})])
    s = decide_dataset(SCHEMA, inp, tmp_path / "out.jsonl", model=str(tiny_dir), device="cpu", replicas=2,
                       batch_size=4)
    assert s["decided"] == 20 and s["duplicates_dropped"] == 0
    assert_same_decisions(read_out(tmp_path / "out.jsonl"), reference(tiny, rows))
    reasons = {b["id"]: b["error"] for b in s["skipped"]}
    assert reasons["empty"] == "context is empty" and reasons["number"] == "context must be a string, got int"
    assert sum(1 for b in s["skipped"] if b["id"] is None) == 2  # the line that is not JSON, the line without id
    assert len(read_out(tmp_path / "out.errors.jsonl")) == 4


def _actor_pids() -> set[int]:
    import psutil

    pids = set()
    for p in psutil.Process().children(recursive=True):
        try:  # a killed actor not yet reaped is a zombie: dead, and its cmdline cannot be read
            if p.status() != psutil.STATUS_ZOMBIE and "DecideActor" in " ".join(p.cmdline()):
                pids.add(p.pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return pids


def test_a_killed_actor_is_restarted_and_every_id_is_written_once(local_ray, tiny, tiny_dir, tmp_path):
    rows = corpus(32)
    killed: list[int] = []

    def kill_one(decided, bad):
        if not killed:  # after the first written batch: the other batches are queued or in flight
            pid = sorted(_actor_pids())[0]
            os.kill(pid, signal.SIGKILL)  # what the OOM killer does
            killed.extend([pid, decided])

    s = decide_dataset(SCHEMA, write_jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl",
                       model=str(tiny_dir), device="cpu", replicas=2, batch_size=4, on_batch=kill_one)
    assert killed and killed[1] < 32, "the actor was killed mid-run"
    assert killed[0] not in _actor_pids()
    assert s["decided"] == 32 and not s["skipped"]
    assert_same_decisions(read_out(tmp_path / "out.jsonl"), reference(tiny, rows))


def test_a_crashed_driver_resumes_from_what_was_written(local_ray, tiny, tiny_dir, tmp_path):
    rows = corpus(12)
    want = reference(tiny, rows)
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    first = [json.dumps(want[r["id"]], ensure_ascii=False) for r in rows[:5]]
    out.write_text("".join(x + "\n" for x in first) + first[0][:40])  # a crash mid-line
    runner = CliRunner()
    args = ["decide", "--schema", str(write_jsonl(tmp_path / "s.json", [SCHEMA])), "--input", str(inp),
            "--output", str(out), "--model", str(tiny_dir), "--device", "cpu", "--ray", "--replicas", "2"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "give --resume" in r.output
    r = runner.invoke(app, args + ["--resume"])
    assert r.exit_code == 0, r.output
    assert "decided 7 rows" in r.output and "5 already written" in r.output
    got = read_out(out)
    assert [json.dumps(g, ensure_ascii=False) for g in got[:5]] == first  # what was written stays as it was
    assert_same_decisions(got, want)


def test_parquet_and_csv_in_parquet_out(local_ray, tiny, tiny_dir, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = corpus(6)
    pq.write_table(pa.table({"id": [str(r["id"]) for r in rows], "context": [r["context"] for r in rows]}),
                   tmp_path / "in.parquet")
    (tmp_path / "in.csv").write_text("id,context\n" + "".join(f"{r['id']},\"{r['context']}\"\n" for r in rows)
                                     + "7,\n")
    want = {str(k): v for k, v in reference(tiny, rows).items()}
    for name in ("in.parquet", "in.csv"):
        out = tmp_path / f"{name[3:]}.out.parquet"
        s = decide_dataset(SCHEMA, tmp_path / name, out, model=str(tiny_dir), device="cpu", replicas=1)
        table = pq.read_table(out, columns=["key", "record"]).to_pylist()
        got = [json.loads(t["record"]) for t in table]
        assert [json.loads(t["key"]) for t in table] == [g["id"] for g in got]
        assert_same_decisions([{**g, "id": str(g["id"])} for g in got],
                              {k: {**v, "id": k} for k, v in want.items()})
        assert [b["error"] for b in s["skipped"]] == ([] if name.endswith("parquet") else ["context is empty"])


def test_missing_columns_and_batch_prior_are_refused(local_ray, tiny_dir, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "in.parquet")
    with pytest.raises(ScaleError, match="needs columns 'id' and 'context'"):
        decide_dataset(SCHEMA, tmp_path / "in.parquet", tmp_path / "o.jsonl", model=str(tiny_dir))
    with pytest.raises(ScaleError, match="prior='batch'"):
        decide_dataset(SCHEMA, tmp_path / "in.parquet", tmp_path / "o2.jsonl", prior="batch")
    with pytest.raises(TypedLMError, match="scoring: Input should be 'labels' or 'slots'"):  # DecideOptions
        decide_dataset(SCHEMA, tmp_path / "in.parquet", tmp_path / "o2.jsonl", scoring="fast")
    with pytest.raises(TypedLMError, match="abstain_below_margin: Input should be less"):  # once, not per row
        decide_dataset(SCHEMA, tmp_path / "in.parquet", tmp_path / "o2.jsonl", abstain_below_margin=3)
    assert not (tmp_path / "o2.jsonl").exists()
