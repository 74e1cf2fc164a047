"""The soundness ratchet: the official JSON-Schema-Test-Suite (draft 2020-12) through the grammar path.

Fails on any false positive (an instance the schema forbids accepted by the grammar) and on any change
of passes per file versus tests/data/jsonschema_ratchet.json (a rise must be written into the ratchet
in the same commit: ``typedlm bench jsonschema-suite --write-ratchet tests/data/jsonschema_ratchet.json``).
"""

import json

import pytest

from pathlib import Path

from typedlm.bench import jsonschema_suite as suite

RATCHET = Path(__file__).parent / "data" / "jsonschema_ratchet.json"


@pytest.fixture(scope="module")
def grammars():
    return suite.default_grammars()


@pytest.fixture(scope="module")
def report(grammars):
    return suite.run_suite(suite.DEFAULT_SUITE, grammars)


def test_suite_copy_is_complete():
    root = suite.DEFAULT_SUITE
    assert (root / "LICENSE").is_file() and (root / "SOURCE.md").is_file()
    cases = suite.load_suite(root)
    assert {c.group for c in cases} == {"required", "optional"}
    assert sum(len(c.tests) for c in cases if c.group == "required") == 1299


def test_zero_false_positives(report):
    fps = [f"{r.file} | {r.case} | {r.test}" for r in report.results if r.outcome == "false_positive"]
    assert fps == []


def test_ratchet(report):
    ratchet = json.loads(RATCHET.read_text())
    assert suite.ratchet_problems(report, ratchet) == []
    req = report.totals("required")
    assert req["pass"] / req["total"] >= 0.60


def test_ratchet_catches_a_drop_and_a_false_positive(report):
    ratchet = json.loads(RATCHET.read_text())
    worse = json.loads(json.dumps(ratchet))
    worse["files"]["type.json"]["pass"] += 1
    assert any("type.json" in p for p in suite.ratchet_problems(report, worse))
    fake = suite.SuiteReport(results=list(report.results))
    r0 = fake.results[0]
    fake.results[0] = suite.TestResult(r0.group, r0.file, r0.case, r0.test, False, "false_positive")
    assert any(p.startswith("false positive") for p in suite.ratchet_problems(fake, ratchet))


def test_every_outcome_is_classified(report):
    assert {r.outcome for r in report.results} <= set(suite.OUTCOMES)
    for g in suite.GROUPS:
        t = report.totals(g)
        assert t["total"] == sum(t[o] for o in suite.OUTCOMES)


def test_renderings_follow_schema_order_and_compact_separators():
    schema = {"properties": {"b": {}, "a": {}}}
    texts = suite.renderings({"a": 1.0, "c": [1, {"x": None}], "b": "é"}, schema)
    assert texts[0] == '{"b":"é","a":1.0,"c":[1,{"x":null}]}'
    assert '{"b":"é","a":1,"c":[1,{"x":null}]}' in texts  # integral float written as an integer
    assert '{"a":1.0,"c":[1,{"x":null}],"b":"é"}' in texts  # instance order


def test_accepts_needs_the_whole_text(grammars):
    from typedlm.grammar.spec import make_constraint

    compiled, _ = grammars.compile(make_constraint(json_schema={"type": "array"}, strict=False,
                                                   any_whitespace=False))
    assert suite.accepts(compiled, "[1]")
    assert not suite.accepts(compiled, "[1")  # a prefix cannot stop
    assert not suite.accepts(compiled, "[1]]")


def test_cli_writes_json(tmp_path):
    from typer.testing import CliRunner

    from typedlm.cli import app

    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["bench", "jsonschema-suite", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    for g in ("required", "optional"):
        assert set(data[g]) == {"total", "pass", "false_positive", "false_negative", "refused", "compile_error"}
    bad = CliRunner().invoke(app, ["bench", "jsonschema-suite", "--suite", str(tmp_path)])
    assert bad.exit_code == 2
