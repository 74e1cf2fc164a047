"""`typedlm bench grammar` walks real JSON instances through the grammar (smoke + result shape)."""

import json

import pytest
from typer.testing import CliRunner

from typedlm.bench import grammar
from typedlm.cli import app


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_bench_grammar_default_tokenizer(tmp_path, engine):
    out = tmp_path / "g.json"
    r = CliRunner().invoke(app, ["bench", "grammar", "--tokenizer", "default", "--repeats", "1", "--json", str(out),
                                 "--grammar-engine", engine])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["engine"] == engine
    (row,) = res["results"]
    assert row["vocab"] == 49152
    assert set(row["per_case"]) == {name for name, _, _ in grammar.CASES}
    assert row["mask_fill_us"]["n"] == sum(c["tokens"] for c in row["per_case"].values())
    assert row["compile_cached_us"]["p50"] < row["compile_cold_ms"]["p50"] * 1e3


def test_bench_instances_are_valid_for_their_schemas():
    import jsonschema

    for _, schema, instance in grammar.CASES:
        jsonschema.validate(instance, schema)


def test_bad_tokenizer_option():
    r = CliRunner().invoke(app, ["bench", "grammar", "--tokenizer", "gpt2"])
    assert r.exit_code == 2 and "--tokenizer" in r.stderr


def test_auto_phases_follow_the_compilers_own_path(tiny):
    """`--phases` (issue 22): llguidance's phases where it takes the core form; its refusal, the automata
    normalization and xgrammar's compile where auto falls back; a normalizer refusal ends the row."""
    from typedlm.bench.schema_compile import auto_phases, phases_summary

    info = tiny.grammars.tokenizer_info
    taken = auto_phases({"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 1}, info)
    assert {"normalize_llg", "llguidance", "total"} <= set(taken) and "xgrammar" not in taken
    fallback = auto_phases({"type": "array", "contains": {"const": 1}, "minContains": 2}, info)
    assert fallback["llguidance_declined"] and {"normalize_xgrammar", "xgrammar"} <= set(fallback)
    refused = auto_phases({"type": "string", "pattern": "(?=a)b"}, info)
    assert refused["refused"] == "pattern" and "llguidance" not in refused
    summary = phases_summary([{"name": "x", **r} for r in (taken, fallback, refused)])
    assert summary["compiled"] == 2 and summary["xgrammar_fallbacks"] == 1
