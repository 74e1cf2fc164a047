"""The soundness ratchet: the official JSON-Schema-Test-Suite, every draft, through the grammar path.

Fails on any false positive (an instance the schema forbids accepted by the grammar) and on any change
of passes per file versus tests/data/jsonschema_ratchet/<draft>.json (a rise must be written into the
ratchet in the same commit: ``typedlm bench jsonschema-suite --draft all --write-ratchet tests/data/jsonschema_ratchet``).
The second grammar engine has ratchets of its own, ``tests/data/jsonschema_ratchet/<engine>/``: ``auto`` on
every draft, ``llguidance`` alone (what it cannot read exactly is a compile error) on 2020-12
(``--grammar-engine auto --write-ratchet tests/data/jsonschema_ratchet/auto``).
"""

import json

import pytest

from tests.support import DATA
from tests.support.grammar import renderings
from typedlm.bench import jsonschema_suite as suite

RATCHETS = DATA / "jsonschema_ratchet"
SUITE = DATA / "json-schema-test-suite"


REQUIRED_TESTS = {"draft4": 618, "draft6": 839, "draft7": 927, "draft2019-09": 1259, "draft2020-12": 1299}


@pytest.fixture(scope="module")
def grammars():
    return suite.default_grammars()


@pytest.fixture(scope="module")
def report(grammars):
    return suite.run_suite(SUITE, grammars)


ENGINE_RUNS = [(d, "xgrammar") for d in suite.DRAFTS] + [(d, "auto") for d in suite.DRAFTS] + \
    [("draft2020-12", "llguidance")]


@pytest.fixture(scope="module", params=ENGINE_RUNS, ids=[f"{d}-{e}" for d, e in ENGINE_RUNS])
def draft_report(request):
    draft, engine = request.param
    return draft, engine, suite.run_suite(SUITE, draft=draft, engine=engine)


def test_suite_copy_is_complete():
    root = SUITE
    assert suite.DEFAULT_SUITE == SUITE.resolve()  # what the bench reads in a checkout
    assert (root / "LICENSE").is_file() and (root / "SOURCE.md").is_file()
    for draft, n in REQUIRED_TESTS.items():
        cases = suite.load_suite(root, draft)
        assert {c.group for c in cases} == {"required", "optional"}
        assert sum(len(c.tests) for c in cases if c.group == "required") == n


def test_zero_false_positives(draft_report):
    draft, _, report = draft_report
    fps = [f"{draft} {r.file} | {r.case} | {r.test}" for r in report.results if r.outcome == "false_positive"]
    assert fps == []


def test_ratchet(draft_report):
    draft, engine, report = draft_report
    folder = RATCHETS if engine == "xgrammar" else RATCHETS / engine
    ratchet = json.loads((folder / f"{draft}.json").read_text())
    assert suite.ratchet_problems(report, ratchet) == []
    req = report.totals("required")
    if engine != "llguidance":
        assert req["pass"] / req["total"] >= (0.90 if draft == "draft2020-12" else 0.60)


def test_older_drafts_are_read_in_their_own_meaning():
    cases = suite.load_suite(SUITE, "draft4")
    assert all(c.schema["$schema"] == "http://json-schema.org/draft-04/schema#" for c in cases
               if isinstance(c.schema, dict))
    # draft 4: 1.0 is not an integer, so it is not rendered as "1"
    assert renderings(1.0, {}, int_floats=False) == ["1.0"]


def test_ratchet_catches_a_drop_and_a_false_positive(report):
    ratchet = json.loads((RATCHETS / "draft2020-12.json").read_text())
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
    res = CliRunner().invoke(app, ["bench", "jsonschema-suite", "--draft", "draft6", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert list(data) == ["draft6"]
    for g in ("required", "optional"):
        assert set(data["draft6"][g]) == {"total", "pass", "false_positive", "false_negative", "refused",
                                          "compile_error"}
    bad = CliRunner().invoke(app, ["bench", "jsonschema-suite", "--suite", str(tmp_path)])
    assert bad.exit_code == 2
    ratchets = tmp_path / "ratchets"
    res = CliRunner().invoke(app, ["bench", "jsonschema-suite", "--draft", "draft6", "--no-table",
                                   "--grammar-engine", "xgrammar", "--write-ratchet", str(ratchets)])
    assert res.exit_code == 0, res.output
    assert json.loads((ratchets / "draft6.json").read_text()) == json.loads((RATCHETS / "draft6.json").read_text())
    bad = CliRunner().invoke(app, ["bench", "jsonschema-suite", "--draft", "draft5"])
    assert bad.exit_code == 2 and "draft5" in bad.output
