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
