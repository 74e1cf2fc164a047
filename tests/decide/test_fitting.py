"""Variants computed from stored scores equal decide's own answers; `typedlm calibrate` and `decide --prior`."""

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from typedlm.cli import app
from typedlm.decide.calibrate import collect as fitting
from typedlm.decide.api import decide_many, plan_for
from typedlm.decide.calibrate.bundle import CalibrationBundle, FieldCalibration
from typedlm.decide.options import DecideOptions
from typedlm.decide.prior import fingerprint
from typedlm.decide.prompt import PROMPT_VERSION

SCHEMA = {"fields": {"topic": {"type": "enum", "description": "Topic?", "choices": ["sport", "tech", "politics"]},
                     "tags": {"type": "multi", "description": "Tags?", "choices": ["local", "world"]}}}
TEXTS = ["The match ended two all.", "A new phone chip was announced.", "Parliament passed the budget.",
         "The striker signed for a world club.", "Voters in the city go to the polls."]


def _cases():
    return [SimpleNamespace(id=f"c{i}", split="test", context=t, labels={"topic": "sport", "tags": ["local"]})
            for i, t in enumerate(TEXTS)]


@pytest.mark.parametrize("prior", ["none", "neutral", "batch"])
def test_variants_from_scores_equal_decide(tiny, prior):
    plan = plan_for(SCHEMA, tiny)
    cases = fitting.collect(tiny, SCHEMA, _cases())
    neutral = fitting.neutral_logs(tiny, plan) if prior == "neutral" else None
    bundle = CalibrationBundle(model="tiny", model_hash=fingerprint(tiny), prompt_version=PROMPT_VERSION,
                               scoring="labels",
                               fields={"topic": FieldCalibration(type="enum", kind="temperature", temperature=1.7,
                                                                 prior=prior),
                                       "tags": FieldCalibration(type="multi", kind="logistic", a=0.8, b=0.3,
                                                                prior=prior, set_rule="count", threshold=0.5)})
    for b in (None, bundle):
        opts = DecideOptions(prior=prior, calibration=b)
        got = fitting.decisions(plan, cases, "tiny", opts, neutral, batch=len(cases))
        want = decide_many(SCHEMA, TEXTS, engine=tiny, options=opts)
        for g, w in zip(got, want):
            assert g.value_dict() == w.value_dict()
            for n in ("topic", "tags"):
                assert g.fields[n].probabilities == pytest.approx(w.fields[n].probabilities, rel=1e-5)
                assert (g.fields[n].prior, g.fields[n].calibrator) == (w.fields[n].prior, w.fields[n].calibrator)


def test_collect_resumes_only_lines_of_this_prompt_version(tiny, tmp_path):
    path = tmp_path / "scores.jsonl"
    first = fitting.collect(tiny, SCHEMA, _cases()[:2], path)
    lines = path.read_text().splitlines()
    assert [json.loads(x)["prompt_version"] for x in lines] == [PROMPT_VERSION] * 2
    fitting.collect(tiny, SCHEMA, _cases()[:2], path)  # resumed: nothing scored again
    assert path.read_text().splitlines() == lines
    old = json.loads(lines[0])
    stale = {**old, "prompt_version": "0", "scores": [[0.0, 0.0, 0.0]] + old["scores"][1:]}
    path.write_text(json.dumps(stale) + "\n" + lines[1] + "\n")
    again = fitting.collect(tiny, SCHEMA, _cases()[:2], path)  # another prompt's line: that case is scored again
    assert len(path.read_text().splitlines()) == 3
    assert again[0].scores[0].log_scores == pytest.approx(first[0].scores[0].log_scores, abs=1e-5)


def test_scores_are_reused_only_from_raw_runs_of_this_prompt(tiny, tmp_path):
    """An eval run's lines stand in for scoring only when they are raw (prior none) and its recorded prompt
    hash is this code's prompt."""
    from typedlm.decide.prompt import prompt_hash
    from typedlm.eval.cases import Case as EvalCase
    from typedlm.eval.runner import prediction_line
    from typedlm.eval.tracks import decision_answers

    schema = {"fields": {"topic": SCHEMA["fields"]["topic"]}}
    plan = plan_for(schema, tiny)
    cases = [EvalCase(f"c{i}", f"c{i}", "t", schema, t, {"topic": "sport"}, "test") for i, t in enumerate(TEXTS[:3])]

    def run_folder(name, prior, hash_):
        folder = tmp_path / name
        folder.mkdir()
        ds = decide_many(schema, TEXTS[:3], engine=tiny, prior=prior)
        lines = [prediction_line(run_id="r", track="parallel", mode="labels", case=c, dataset="t", gold=c.labels,
                                 answer=a, case_latency_s=0.1, permutation=None)
                 for c, d in zip(cases, ds) for a in decision_answers(plan.schema, d, 0.1)]
        (folder / "predictions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        (folder / "run.json").write_text(json.dumps({"prompts": {"parallel/labels": hash_}}))
        return folder / "predictions.jsonl"

    ids = {c.id for c in cases}
    got = fitting.from_predictions(plan, run_folder("raw", "none", prompt_hash(plan)), ids)
    want = fitting.collect(tiny, schema, [SimpleNamespace(id=c.id, split="test", context=c.context, labels=c.labels)
                                          for c in cases])
    assert sorted(c.id for c in got) == sorted(ids)
    for g in got:
        w = next(x for x in want if x.id == g.id)
        assert g.scores[0].log_scores == pytest.approx(w.scores[0].log_scores, abs=1e-5)
    assert fitting.from_predictions(plan, run_folder("old", "none", "0" * 12), ids) == []  # another prompt
    assert fitting.from_predictions(plan, run_folder("neutral", "neutral", prompt_hash(plan)), ids) == []


def _cases_file(tmp_path):
    import random

    rng = random.Random(0)
    lines = []
    for i in range(16):
        topic = rng.choice(["sport", "tech", "politics"])
        lines.append({"id": f"c{i}", "schema": SCHEMA, "context": f"{rng.choice(TEXTS)} ({topic})",
                      "labels": {"topic": topic, "tags": rng.choice([[], ["local"], ["world", "local"]])},
                      "split": "calibration" if i < 8 else "test"})
    p = tmp_path / "cases.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


def test_calibrate_cli_chooses_rules_on_the_calibration_split(tiny_dir, tmp_path):
    out = tmp_path / "bundle.json"
    r = CliRunner().invoke(app, ["calibrate", "--data", str(_cases_file(tmp_path)), "--model", str(tiny_dir),
                                 "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    rep, bundle = got["report"], CalibrationBundle.model_validate_json(out.read_text())
    assert bundle.id == got["id"] and rep["n_fit"] == 8 and bundle.fit["split"] == "calibration"
    for name in ("topic", "tags"):  # the choice and its CV score are in the bundle, and it is a candidate's row
        chosen = bundle.fit["rules"][name]
        assert chosen in rep["candidates"][name] and 0.0 <= chosen["cv_acc"] <= 1.0
        assert bundle.fields[name].prior == chosen["prior"] and chosen["prior"] in ("neutral", "none")
    assert bundle.fields["tags"].set_rule == bundle.fit["rules"]["tags"]["set_rule"]
    assert {c["set_rule"] for c in rep["candidates"]["tags"]} == {"threshold", "count", "cardinality"}
    assert set(rep["seconds"]) == {"scoring", "fitting", "total"}


def test_calibrate_cli_kind(tiny_dir, tmp_path):
    base = ["calibrate", "--data", str(_cases_file(tmp_path)), "--model", str(tiny_dir), "--priors", "none",
            "--out", str(tmp_path / "b.json"), "--limit", "8", "--json"]
    r = CliRunner().invoke(app, base + ["--kind", "cubic"])
    assert r.exit_code == 2 and "--kind must be auto or one of temperature, bias, vector, matrix" in r.stderr
    r = CliRunner().invoke(app, base + ["--kind", "bias"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["bundle"]["fields"]["topic"]["kind"] == "bias"  # --kind: scalar fields only
    assert out["bundle"]["fields"]["tags"]["kind"] in ("logistic", "vector")
    assert {c["kind"] for c in out["report"]["candidates"]["tags"]} == {"logistic", "vector"}
    assert {c["kind"] for c in out["report"]["candidates"]["topic"]} == {"bias"}
    assert {c["prior"] for c in out["report"]["candidates"]["topic"]} == {"none"}


def test_decide_cli_prior_and_calibration(tiny, tiny_dir, tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(SCHEMA))
    bundle = CalibrationBundle(model="tiny", model_hash=fingerprint(tiny), prompt_version=PROMPT_VERSION,
                               scoring="labels",
                               fields={"topic": FieldCalibration(type="enum", kind="temperature", temperature=2.0)})
    bpath = tmp_path / "b.json"
    bpath.write_text(bundle.model_dump_json())
    base = ["decide", "--schema", str(schema), "--context", TEXTS[0], "--model", str(tiny_dir), "--json"]
    r = CliRunner().invoke(app, base + ["--prior", "neutral", "--calibration", str(bpath)])
    assert r.exit_code == 0, r.output
    f = json.loads(r.stdout)["fields"]["topic"]
    assert (f["prior"], f["calibrator"], f["temperature"]) == ("neutral", bundle.id, 2.0)
    r = CliRunner().invoke(app, base + ["--prior", "none", "--calibration", str(bpath)])  # the field's rule wins
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["fields"]["topic"]["prior"] == "neutral"
    assert json.loads(r.stdout)["fields"]["tags"]["prior"] == "none"  # not in the bundle: the option
    r = CliRunner().invoke(app, base + ["--prior", "batch"])
    assert r.exit_code == 2 and "at least 2 contexts" in r.stderr


def test_decide_cli_refuses_unsatisfiable_constraints_before_loading(tmp_path):
    schema = tmp_path / "s.json"
    bad = {"fields": {**SCHEMA["fields"], "tags": {**SCHEMA["fields"]["tags"], "min_selected": 2,
                                                   "exclusive": [["local", "world"]]}}}
    schema.write_text(json.dumps(bad))
    r = CliRunner().invoke(app, ["decide", "--schema", str(schema), "--context", "x", "--model", "/nonexistent"])
    assert r.exit_code == 2 and "constraints cannot all hold" in r.stderr
    assert "min_selected 2" in r.stderr and "exclusive ['local', 'world']" in r.stderr


def test_averaged_variants_from_view_files_equal_decide_averaged(tiny, tmp_path):
    """order="averaged": each view collected into its own file, averaged offline, equals decide's averaging
    (neutral prior and a bundle fitted for that order included); a bundle of the other order is refused."""
    schema = {"fields": {**SCHEMA["fields"], "topic": {**SCHEMA["fields"]["topic"],
                                                         "choices": ["tech", "sport", "politics"]}}}
    plan = plan_for(schema, tiny)
    path = tmp_path / "scores.jsonl"
    cases = fitting.collect(tiny, schema, _cases(), path, order="averaged")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores-canonical.jsonl", "scores-mirror.jsonl"]
    neutral = fitting.neutral_logs(tiny, plan, "averaged")
    bundle = CalibrationBundle(model="tiny", model_hash=fingerprint(tiny), prompt_version=PROMPT_VERSION,
                               scoring="labels", order="averaged",
                               fields={"topic": FieldCalibration(type="enum", kind="temperature", temperature=1.7,
                                                                 prior="neutral")})
    for b in (None, bundle):
        opts = DecideOptions(calibration=b, order="averaged")
        got = fitting.decisions(plan, cases, "tiny", opts, neutral, batch=len(cases))
        want = decide_many(schema, TEXTS, engine=tiny, options=opts)
        for g, w in zip(got, want):
            assert g.value_dict() == w.value_dict()
            assert g.fields["topic"].probabilities == pytest.approx(w.fields["topic"].probabilities, rel=1e-5)
    with pytest.raises(Exception, match="order 'averaged'"):
        decide_many(schema, TEXTS[:1], engine=tiny, calibration=bundle)
