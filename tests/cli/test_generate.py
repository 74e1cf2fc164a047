"""`typedlm` CLI: stdout carries only the generated text, stats on stderr, bad input exits 2."""

import json
import re

import jsonschema
import pytest
from typer.testing import CliRunner

from typedlm.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_generate_regex_prints_only_the_text(tiny_dir):
    r = run("generate", "--model", str(tiny_dir), "--regex", r"[A-Z]{3}-\d{4}", "--seed", "3",
            "--temperature", "1", "Give a code")
    assert r.exit_code == 0, r.output
    assert re.fullmatch(r"[A-Z]{3}-\d{4}\n", r.stdout)
    assert "tokens" in r.stderr and "[stop]" in r.stderr


def test_generate_choice_and_json_output(tiny_dir):
    r = run("generate", "--model", str(tiny_dir), "--choice", 'say "yes"', "--choice", "nö", "--json", "--seed", "1",
            "--temperature", "1", "q")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["text"] in ('say "yes"', "nö") and d["finish_reason"] == "stop" and d["constraint"] == "choice"


def test_generate_json_schema_file(tiny_dir, tmp_path):
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"enum": ["x", "y"]}},
              "required": ["a", "b"]}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(schema))
    r = run("generate", "--model", str(tiny_dir), "--json-schema", str(f), "--temperature", "1", "--seed", "2",
            "--max-tokens", "300", "q")
    assert r.exit_code == 0, r.output
    jsonschema.validate(json.loads(r.stdout), schema)


def test_generate_grammar_and_lark_files(tiny_dir, tmp_path):
    g = tmp_path / "g.ebnf"
    g.write_text('root ::= "ab" [0-9]')
    lark = tmp_path / "g.lark"
    lark.write_text('start: "cd" /[0-9]/\n')
    assert re.fullmatch(r"ab[0-9]\n", run("generate", "--model", str(tiny_dir), "--grammar", str(g), "q").stdout)
    assert re.fullmatch(r"cd[0-9]\n", run("generate", "--model", str(tiny_dir), "--lark", str(lark), "q").stdout)


@pytest.mark.parametrize("args, reason", [
    (["--regex", "a", "--choice", "b"], "regex and choice"),
    (["--regex", "(?=a)a"], "Lookahead"),
    (["--json-schema", "/no/such/file.json"], "cannot read"),
    (["--json-schema", "{bad}"], "cannot read"),
    (["--temperature", "-2", "--json-object"], "temperature"),
    (["--model", "./no/such/model", "--json-object"], "does not exist"),
])
def test_bad_input_exits_2_with_one_line(tiny_dir, args, reason):
    full = ["generate", *args, "q"]
    if "--model" not in args:
        full[1:1] = ["--model", str(tiny_dir)]
    r = run(*full)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and reason in lines[0], r.stderr
    assert r.stdout == ""


def test_bad_schema_file_content(tiny_dir, tmp_path):
    f = tmp_path / "bad.json"
    f.write_text("{not json")
    r = run("generate", "--model", str(tiny_dir), "--json-schema", str(f), "q")
    assert r.exit_code == 2 and "not valid JSON" in r.stderr
    f.write_text(json.dumps({"type": "integer", "multipleOf": 2.5}))
    r = run("generate", "--model", str(tiny_dir), "--json-schema", str(f), "q")
    assert r.exit_code == 2 and "multipleOf" in r.stderr and "/multipleOf" in r.stderr


def test_schema_refusal_comes_before_the_model_load(tmp_path, monkeypatch):
    """A refused schema exits 2 naming keyword and pointer without loading any model."""
    import typedlm.engine

    def no_load(*a, **k):
        raise AssertionError("the model was loaded before the schema was checked")

    monkeypatch.setattr(typedlm.engine, "load_engine", no_load)
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?!x)"}}}))
    r = run("generate", "--json-schema", str(f), "q")
    assert r.exit_code == 2, r.output
    assert "keyword 'pattern' at '/properties/a/pattern'" in r.stderr


def test_doctor_json():
    r = run("doctor", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {"python", "versions", "device", "default_model", "cache_dir", "grammar_enabled"} <= set(d)
    assert d["versions"]["xgrammar"] and d["versions"]["torch"]
    assert d["default_model"]["gguf"].endswith(".gguf")


def test_models_list_and_convert():
    r = run("models", "convert", "default")
    assert r.exit_code == 0, r.output
    r = run("models", "--json")
    assert r.exit_code == 0
    assert any(row["name"] == "smollm2-135m-instruct" for row in json.loads(r.stdout))
    r = run("models", "convert", "some/hubid")
    assert r.exit_code == 2 and "not a GGUF" in r.stderr


@pytest.mark.real_model
def test_cli_on_the_default_model(tmp_path):
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                               "hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}},
              "required": ["color", "hex"], "additionalProperties": False}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(schema))
    r = run("generate", "--json-schema", str(f), "Pick a color and its hex code, as JSON.")
    assert r.exit_code == 0, r.output
    jsonschema.validate(json.loads(r.stdout), schema)
    r = run("generate", "--regex", r"[A-Z]{3}-\d{4}", "Invent a ticket id.")
    assert re.fullmatch(r"[A-Z]{3}-\d{4}\n", r.stdout)
    r = run("generate", "--choice", "positive", "--choice", "negative", "Sentiment of: I love it!")
    assert r.stdout.strip() in ("positive", "negative")


def test_every_command_that_loads_a_model_takes_backend():
    """``--model`` means a model load, so ``--backend`` sits beside it (``validate`` reads only a tokenizer;
    ``bench mlx`` runs both backends by design; ``bench jump-forward`` loads the default model)."""
    import typer

    def walk(c, path=()):
        if hasattr(c, "commands"):  # a group (typer's own class)
            for name, sub in c.commands.items():
                yield from walk(sub, path + (name,))
        else:
            yield " ".join(path), {o for p in c.params for o in getattr(p, "opts", [])}

    commands = dict(walk(typer.main.get_command(app)))
    loads = {n for n, opts in commands.items() if "--model" in opts} - {"validate", "bench mlx"}
    assert {"generate", "serve", "decide", "calibrate", "eval", "bench decide", "bench itl", "bench trust"} <= loads
    assert all("--backend" in commands[n] for n in loads | {"bench jump-forward"}), \
        [n for n in loads if "--backend" not in commands[n]]
