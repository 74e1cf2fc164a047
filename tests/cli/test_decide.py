"""``typedlm decide`` / ``typedlm validate`` exit codes and output (tiny model saved as an HF directory)."""

import json

import pytest
from typer.testing import CliRunner

from typedlm.cli import app

SCHEMA = {"fields": {"spam": {"type": "boolean", "description": "Is it spam?"},
                     "tone": {"type": "enum", "description": "Tone?", "choices": ["calm", "angry"]}}}


@pytest.fixture()
def schema_file(tmp_path):
    p = tmp_path / "schema.json"
    p.write_text(json.dumps(SCHEMA))
    return str(p)


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_decide_json(tiny_dir, schema_file):
    r = run("decide", "--schema", schema_file, "--context", "Buy cheap watches!!!", "--model", tiny_dir, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert set(out["value"]) == {"spam", "tone"} and isinstance(out["value"]["spam"], bool)
    assert out["fields"]["tone"]["value"] in ("calm", "angry")


def test_decide_preset_table(tiny_dir):
    r = run("decide", "--preset", "content_moderation", "--model", tiny_dir, "--scoring", "slots")
    assert r.exit_code == 0, r.output
    assert "action" in r.stdout and "violations" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--context", "x"], "give exactly one of --schema FILE or --preset NAME"),
    (["--preset", "nope", "--context", "x"], "no preset 'nope'"),
    (["--schema", "SCHEMA"], "give --context TEXT or --context-file FILE"),
    (["--schema", "SCHEMA", "--context", "x", "--scoring", "fast"], "--scoring: Input should be 'labels' or 'slots'"),
    (["--schema", "SCHEMA", "--context", "   "], "the context is empty"),
    (["--schema", "SCHEMA", "--context-file", "/nonexistent/ctx.txt"], "cannot read context file"),
    (["--schema", "BAD", "--context", "x"], "field 'tone': duplicate choice 'calm'"),
    (["--schema", "SCHEMA", "--context", "x", "--abstain-below", "3"], "--abstain-below: Input should be less than or equal to 1"),
])
def test_decide_bad_input_exits_2(args, needle, schema_file, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"fields": {"tone": {"type": "enum", "description": "d", "choices": ["calm", "calm"]}}}))
    args = [{"SCHEMA": schema_file, "BAD": str(bad)}.get(a, a) for a in args]
    r = run("decide", *args)
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err


def test_decide_input_file_jsonl(tiny_dir, schema_file, tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text('"Buy cheap watches!!!"\n\n{"id": "t2", "context": "Thank you for the help."}\n"Calm down."\n')
    out = tmp_path / "out.jsonl"
    r = run("decide", "--schema", schema_file, "--input", str(inp), "--output", str(out), "--model", tiny_dir)
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == [1, "t2", 4]
    single = json.loads(run("decide", "--schema", schema_file, "--context", "Thank you for the help.",
                            "--model", tiny_dir, "--json").stdout)
    assert lines[1]["value"] == single["value"] and set(lines[1]) == {"id", *single}
    for bad, needle in (('{"text": "x"}\n', "needs 'context'"), ('"  "\n', "empty"), ("{oops\n", "not valid JSON"),
                        ("\n", "no contexts")):
        inp.write_text(bad)
        r = run("decide", "--schema", schema_file, "--input", str(inp), "--model", tiny_dir)
        assert r.exit_code == 2 and needle in r.stderr, r.output
    r = run("decide", "--schema", schema_file, "--input", str(inp), "--context", "x")
    assert r.exit_code == 2 and "only one of --input" in r.stderr


TRUST = {"fields": {
    "spam": {"type": "boolean", "description": "Is it spam?"},
    "tone": {"type": "enum", "description": "Tone?", "choices": ["calm", "angry"], "depends_on": "spam"},
    "tags": {"type": "multi", "description": "Tags?", "choices": ["ads", "bug", "refund"], "min_selected": 1,
             "max_selected": 2}},
    "constraints": [{"if": {"spam": True}, "then": {"tags": "ads"}}]}


def test_decide_cli_constraints_dependencies_abstention(tiny, tiny_dir, tmp_path):
    """The CLI (one context and --input) carries constraints, depends_on, abstention, prior and calibration."""
    from typedlm.decide.calibrate.bundle import CalibrationBundle, FieldCalibration
    from typedlm.decide.prior import fingerprint
    from typedlm.decide.prompt import PROMPT_VERSION

    sch = tmp_path / "trust.json"
    sch.write_text(json.dumps(TRUST))
    r = run("decide", "--schema", sch, "--context", "Buy cheap watches!!!", "--model", tiny_dir, "--json",
            "--abstain-below", "1")
    assert r.exit_code == 0, r.output
    f = json.loads(r.stdout)["fields"]
    assert f["tone"]["score_source"] == "dependency" and set(f["tone"]["given"]) == {"spam"}
    assert (f["tags"]["value"], f["tags"]["reason"]) == (None, "abstain") and 1 <= len(f["tags"]["solver_value"]) <= 2
    assert not f["spam"]["solver_value"] or "ads" in f["tags"]["solver_value"]
    bundle = CalibrationBundle(model="tiny", model_hash=fingerprint(tiny), prompt_version=PROMPT_VERSION,
                               scoring="labels",
                               fields={"tone": FieldCalibration(type="enum", kind="bias", choices=["calm", "angry"],
                                                                temperature=2.0, bias=[0.0, 1.0], prior="batch")})
    bpath = tmp_path / "b.json"
    bpath.write_text(bundle.model_dump_json())
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(t) + "\n" for t in ["Buy cheap watches!!!", "Thanks!", "The app broke."] * 3))
    base = ["decide", "--schema", sch, "--input", inp, "--model", tiny_dir]
    r = run(*base, "--prior", "batch", "--calibration", bpath)
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == 9  # 8 + 1: the last context joins the chunk before (the batch prior needs two)
    for ln in lines:
        t = ln["fields"]["tone"]
        assert (t["prior"], t["calibrator"], t["temperature"]) == ("batch", bundle.id, 2.0)
        assert 1 <= len(ln["fields"]["tags"]["value"]) <= 2 and t["given"] == {"spam": ln["value"]["spam"]}
    r = run("decide", "--schema", sch, "--context", "Thanks!", "--model", tiny_dir, "--calibration", bpath)
    assert r.exit_code == 2 and "field 'tone' (calibration bundle)" in r.stderr and "at least 2" in r.stderr


def test_validate(schema_file, tmp_path):
    r = run("validate", schema_file, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["valid"] is True
    r = run("validate", "typedlm/decide/presets/support_triage.json", "--model", "default")
    assert r.exit_code == 0 and "25 fields" in r.stdout and "slots" in r.stdout
    warn = tmp_path / "warn.json"
    warn.write_text(json.dumps({"fields": {"f": {"type": "enum", "description": "d", "choices": ["Yes", "yes"]}}}))
    r = run("validate", str(warn))
    assert r.exit_code == 0 and "warning:" in r.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"fields": {"f": {"type": "enum", "description": "d", "choices": []}}}))
    r = run("validate", str(bad))
    assert r.exit_code == 2 and "field 'f': 'choices' is empty" in r.stderr
    bad.write_text("{not json")
    assert run("validate", str(bad)).exit_code == 2
