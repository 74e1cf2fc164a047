"""Evaluation runs on the tiny model: the predictions contract, resume (incl. SIGKILL), lock, circuit breaker,
the openai track against a live server."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from typedlm.decide.options import DecideOptions
from typedlm.cli import app
from typedlm.eval.cases import case_from_dict, write_cases
from typedlm.eval.runner import Run, RunError, RunLock, read_jsonl
from typedlm.eval.tracks import NaiveTrack, OpenAITrack, ParallelTrack, top_logprob_scores
from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import free_port, live_server

# the contract issue 10 (calibration) reads: keep in step with docs/ARCHITECTURE.md
KEYS = ["run_id", "track", "mode", "case_id", "group_id", "dataset", "split", "field", "field_type", "choices",
        "gold", "pred", "probabilities", "scores", "correct", "legal_mass", "latency_s", "case_latency_s",
        "permutation", "truncated", "violation", "error", "record"]
SCHEMA = {"description": "Triage a message.",
          "fields": {"topic": {"type": "enum", "description": "Topic?", "choices": ["billing", "login", "other"]},
                     "tags": {"type": "multi", "description": "Which apply?", "choices": ["refund", "bug", "spam"]},
                     "urgent": {"type": "boolean", "description": "Is it urgent?"}}}
TEXTS = ["I was charged twice, refund me.", "The app crashes when I log in.", "Win a free cruise now!!!",
         "Cannot reset my password.", "Where is my invoice?", "Love the product."]


def make_cases(n, *, bad=False):
    out = []
    for i in range(n):
        out.append({"id": f"c{i:03d}", "schema": SCHEMA, "context": TEXTS[i % len(TEXTS)] + f" (#{i})",
                    "labels": {"topic": ["billing", "login", "other"][i % 3], "tags": [["refund"], ["bug"], []][i % 3],
                               "urgent": i % 2 == 0}, "split": "test"})
    if bad:
        out.append({"id": "bad-empty", "schema": SCHEMA, "context": "  ", "split": "test",
                    "labels": {"topic": "billing", "tags": [], "urgent": True}})
        out.append({"id": "bad-label", "schema": SCHEMA, "context": "hello", "split": "test",
                    "labels": {"topic": "weather", "tags": [], "urgent": True}})
    return [case_from_dict(c) for c in out]


def manifest(cases, **kw):
    return {"dataset": "unit", "data_sha256": "x", "split": "test", "limit": None, "cases": len(cases),
            "tracks": [], "flip": True, "model": "tiny", "model_sha256": "y", "prompts": None, **kw}


def softmax(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


@pytest.fixture(scope="module")
def done_run(tiny, tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    cases = make_cases(2, bad=True)
    run = Run(folder, manifest(cases), [ParallelTrack(tiny, DecideOptions(scoring="labels")), NaiveTrack(tiny)])
    with RunLock(folder):
        summary = run.execute(cases, run.open(resume=False))
    return folder, summary


def test_prediction_lines_contract(done_run):
    folder, summary = done_run
    assert summary["status"] == "done" and summary["cases_finished"] == 4
    assert {s["case_id"]: s["reason"] for s in summary["skipped"]} == {
        "bad-empty": "case bad-empty: context is empty",
        "bad-label": "case bad-label: label 'weather' of field 'topic' is not one of its choices "
                     "['billing', 'login', 'other']"}
    lines = read_jsonl(folder / "predictions.jsonl")
    assert lines and all(list(ln) == KEYS for ln in lines)
    for ln in lines:  # the semantics record: how decide made the number (parallel track only)
        if ln["track"] == "parallel":
            assert ln["record"]["score_source"] == "batched"  # the default prior auto: none for booleans
            assert ln["record"]["prior"] == ("none" if ln["field_type"] == "boolean" else "neutral")
        else:
            assert ln["record"] is None
    by = {}
    for ln in lines:
        by.setdefault((ln["track"], ln["mode"], ln["permutation"] is not None), []).append(ln)
    # 2 cases x 3 fields unpermuted per track/mode; permuted: enum + multi fields of the parallel track only
    assert {k: len(v) for k, v in by.items()} == {("parallel", "labels", False): 6, ("parallel", "labels", True): 4,
                                                  ("naive_local", "json", False): 6}
    for ln in lines:
        assert ln["correct"] == (sorted(ln["gold"]) == sorted(ln["pred"] or []) if ln["field_type"] == "multi"
                                 else ln["gold"] == ln["pred"])
        if ln["track"] != "parallel":
            continue
        if ln["field_type"] == "multi":  # scores: option -> [yes, no]; P(yes) = softmax of the pair
            assert set(ln["scores"]) == set(ln["choices"])
            for o, pair in ln["scores"].items():
                assert softmax(pair)[0] == pytest.approx(ln["probabilities"][o], abs=1e-9)
        else:  # scores: choice -> log-score; probabilities = softmax of them
            keys = ln["choices"]
            assert keys == (["true", "false"] if ln["field_type"] == "boolean" else SCHEMA["fields"][ln["field"]]["choices"])
            assert softmax([ln["scores"][k] for k in keys]) == pytest.approx([ln["probabilities"][k] for k in keys])
            assert ln["pred"] == max(ln["probabilities"], key=ln["probabilities"].get)
        if ln["permutation"] is not None:
            assert sorted(ln["permutation"]) == sorted(ln["choices"]) and ln["permutation"] != ln["choices"]
        assert 0 < ln["legal_mass"] <= 1 and ln["latency_s"] > 0
    timing = json.loads((folder / "timing.json").read_text())
    assert timing["parallel/labels"]["cases"] == 2 and timing["naive_local/json"]["field_decisions"] == 6
    meta = json.loads((folder / "run.json").read_text())
    assert meta["status"] == "done" and meta["run_id"] and len(meta["skipped"]) == 2


def test_resume_refuses_other_settings_and_an_existing_folder(done_run, tiny):
    folder, _ = done_run
    cases = make_cases(2, bad=True)
    with pytest.raises(RunError, match="already holds a run"):
        Run(folder, manifest(cases), []).open(resume=False)
    with pytest.raises(RunError, match="settings differ in limit, flip"):
        Run(folder, manifest(cases, limit=2, flip=False), []).open(resume=True)


def test_resume_drops_unjournaled_and_torn_lines(tiny, tmp_path):
    cases = make_cases(4)
    run = Run(tmp_path, manifest(cases, flip=False), [ParallelTrack(tiny, DecideOptions(scoring="slots"))])
    run.execute(cases[:2], run.open(resume=False))
    # simulate a kill after case c002's lines were written but before its journal entry, mid-way through a line
    lines = read_jsonl(tmp_path / "predictions.jsonl")
    orphan = [dict(ln, case_id="c002") for ln in lines[:3]]
    with open(tmp_path / "predictions.jsonl", "a") as fh:
        fh.write("".join(json.dumps(o) + "\n" for o in orphan) + '{"run_id": "torn')
    again = Run(tmp_path, manifest(cases, flip=False), [ParallelTrack(tiny, DecideOptions(scoring="slots"))])
    done = again.open(resume=True)
    assert done == {"c000", "c001"} and again.recovered == {"journal": 2, "lines_dropped": 3}
    again.execute(cases, done)
    lines = read_jsonl(tmp_path / "predictions.jsonl")
    counts = {}
    for ln in lines:
        counts[(ln["case_id"], ln["field"])] = counts.get((ln["case_id"], ln["field"]), 0) + 1
    assert set(counts.values()) == {1} and len(counts) == 4 * 3
    assert {ln["mode"] for ln in lines} == {"slots"} and all(sum(ln["probabilities"].values()) == pytest.approx(1)
                                                             for ln in lines if ln["field_type"] != "multi")
    assert [e["case_id"] for e in read_jsonl(tmp_path / "journal.jsonl")] == ["c000", "c001", "c002", "c003"]


def test_lock_refuses_a_live_writer_and_breaks_a_stale_one(tmp_path):
    (tmp_path / "run.lock").write_text(json.dumps({"pid": os.getpid()}))
    with pytest.raises(RunError, match=f"locked by process {os.getpid()}"):
        RunLock(tmp_path).acquire()
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    (tmp_path / "run.lock").write_text(json.dumps({"pid": p.pid}))  # its process is gone
    with RunLock(tmp_path) as lock:
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    assert not (tmp_path / "run.lock").exists()


def test_circuit_breaker_stops_after_five_infrastructure_failures(tmp_path):
    cases = make_cases(8)
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    run = Run(tmp_path, manifest(cases), [OpenAITrack(dead, model="m", timeout=5)])
    summary = run.execute(cases, run.open(resume=False))
    assert summary["status"] == "circuit_open" and summary["cases_finished"] == 0
    assert "5 consecutive infrastructure failures" in summary["reason"] and "APIConnectionError" in summary["reason"]
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["status"] == "circuit_open" and meta["reason"] == summary["reason"]
    assert read_jsonl(tmp_path / "journal.jsonl") == []  # unjournaled: a resume retries them


def test_top_logprob_scores_floor_and_truncation():
    top = [("bus", math.log(0.5)), (" sport", math.log(0.2)), ("ne", math.log(0.1)), ("xyz", math.log(0.05))]
    scores, legal, truncated, violation = top_logprob_scores(top, ["business", "sport", "negative", "neutral", "tech"])
    assert scores["business"] == pytest.approx(math.log(0.5)) and scores["sport"] == pytest.approx(math.log(0.2))
    assert scores["negative"] == scores["neutral"] == pytest.approx(math.log(0.05))  # "ne": split evenly
    assert scores["tech"] == pytest.approx(math.log(0.05))  # floor: the smallest top-k probability
    assert legal == pytest.approx(0.8) and truncated and not violation
    _, _, truncated, violation = top_logprob_scores([("zzz", -0.1), ("yes", -3.0), ("no", -4.0)], ["yes", "no"])
    assert violation and not truncated


def test_openai_track_against_a_live_server(tiny, tmp_path):
    app_ = create_app(tiny, ServerConfig(max_batch=4, max_queue=32))
    cases = make_cases(3)
    path = tmp_path / "cases.jsonl"
    write_cases(path, cases)
    with live_server(app_) as url:
        r = CliRunner().invoke(app, ["eval", "--data", str(path), "--track", "openai", "--base-url", url + "/v1",
                                     "--out", str(tmp_path / "run"), "--quiet"])
    assert r.exit_code == 0, r.output
    lines = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert len(lines) == 9 and all(list(ln) == KEYS for ln in lines)
    for ln in lines:
        assert ln["track"] == "openai" and ln["mode"] == "logprobs" and ln["permutation"] is None
        assert set(ln["probabilities"]) == set(ln["choices"])
        if ln["field_type"] == "multi":
            assert all(len(v) == 2 for v in ln["scores"].values())
            assert ln["pred"] == [o for o in ln["choices"] if ln["probabilities"][o] >= 0.5]
        else:
            assert sum(ln["probabilities"].values()) == pytest.approx(1.0)
            assert ln["pred"] == max(ln["probabilities"], key=ln["probabilities"].get)
        assert 0 <= ln["legal_mass"] <= 1 and isinstance(ln["truncated"], bool)
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["tracks"][0]["model"] == tiny.name and meta["status"] == "done"


def test_sigkill_mid_run_then_resume_every_case_exactly_once(tiny_dir, tmp_path):
    n = 40
    path = tmp_path / "cases.jsonl"
    write_cases(path, make_cases(n))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "typedlm", "eval", "--data", str(path), "--track", "parallel", "--modes", "labels",
           "--model", str(tiny_dir), "--out", str(out), "--quiet", "--no-flip"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    journal = out / "journal.jsonl"
    deadline = time.monotonic() + 300
    while not (journal.exists() and len(journal.read_text().splitlines()) >= 3):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = len(read_jsonl(journal))
    assert killed_at < n  # it was killed mid-run
    assert (out / "run.lock").exists()  # the dead writer's lock is left behind, and broken on resume
    # resume, then stop it with SIGTERM: a clean stop (exit 130, status interrupted, lock released)
    proc = subprocess.Popen(cmd + ["--resume"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    while len(read_jsonl(journal)) < killed_at + 2:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 130
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "interrupted" and meta["cases_finished"] == len(read_jsonl(journal)) < n
    assert not (out / "run.lock").exists()
    again = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stderr
    ids = [e["case_id"] for e in read_jsonl(journal)]
    assert sorted(ids) == sorted(f"c{i:03d}" for i in range(n))  # every case exactly once
    seen = {}
    for ln in read_jsonl(out / "predictions.jsonl"):
        k = (ln["case_id"], ln["field"], ln["permutation"] is not None)
        seen[k] = seen.get(k, 0) + 1
    assert set(seen.values()) == {1} and len(seen) == n * 3
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "done" and meta["cases_finished"] == n


@pytest.mark.parametrize("args,needle", [
    (["--data", "CASES", "--track", "parallel,magic"], "unknown track(s) ['magic']"),
    (["--data", "CASES", "--track", "openai"], "needs --base-url"),
    (["--data", "imdb"], "--data must be one of bbc, tweets, bbc-multi, news-comments or a cases .jsonl file"),
    (["--data", "CASES", "--limit", "0"], "--limit must be at least 1"),
    (["--data", "CASES", "--modes", "fast"], "--modes must be a comma list"),
    (["--data", "CASES", "--prior", "batch"], "--prior batch needs --no-flip"),
    (["--data", "CASES", "--prior", "bogus"], "prior: Input should be"),
    (["--data", "CASES", "--split", "train"], "no cases in split 'train'"),
    (["--data", "CASES", "--track", "openai", "--base-url", "DEAD"], "APIConnectionError"),
])
def test_eval_cli_bad_input_exits_2(args, needle, tmp_path):
    path = tmp_path / "cases.jsonl"
    write_cases(path, make_cases(2))
    dead = f"http://127.0.0.1:{free_port()}/v1"
    args = [{"CASES": str(path), "DEAD": dead}.get(a, a) for a in args]
    r = CliRunner().invoke(app, ["eval", *args, "--out", str(tmp_path / "run"), "--quiet"])
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: ") and needle in r.stderr


def test_eval_cli_refuses_to_mix_runs(tiny_dir, tmp_path):
    path = tmp_path / "cases.jsonl"
    write_cases(path, make_cases(3))
    base = ["eval", "--data", str(path), "--track", "parallel", "--modes", "labels", "--model", str(tiny_dir),
            "--out", str(tmp_path / "run"), "--quiet", "--no-flip"]
    assert CliRunner().invoke(app, base + ["--limit", "2"]).exit_code == 0
    r = CliRunner().invoke(app, base + ["--limit", "2"])
    assert r.exit_code == 2 and "add --resume" in r.stderr
    r = CliRunner().invoke(app, base + ["--limit", "3", "--resume"])
    assert r.exit_code == 2 and "settings differ in data_sha256, limit, cases" in r.stderr
    r = CliRunner().invoke(app, base + ["--limit", "2", "--resume"])
    assert r.exit_code == 0 and len(read_jsonl(tmp_path / "run" / "journal.jsonl")) == 2
    r = CliRunner().invoke(app, base + ["--limit", "2", "--resume", "--prior", "none"])
    assert r.exit_code == 2 and "settings differ in tracks" in r.stderr  # the prior is in the track settings


def test_eval_cli_prior_reaches_the_parallel_track(tiny_dir, tmp_path):
    path = tmp_path / "cases.jsonl"
    write_cases(path, make_cases(2))
    for prior in ("none", "neutral"):
        out = tmp_path / prior
        r = CliRunner().invoke(app, ["eval", "--data", str(path), "--track", "parallel", "--modes", "labels",
                                     "--model", str(tiny_dir), "--out", str(out), "--quiet", "--no-flip",
                                     "--prior", prior])
        assert r.exit_code == 0, r.output
        rows = read_jsonl(out / "predictions.jsonl")
        assert rows and all(row["record"]["prior"] == prior for row in rows if row.get("record"))
        assert any(row.get("record") for row in rows)
