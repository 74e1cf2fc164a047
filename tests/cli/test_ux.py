"""CLI everyday edges: a light ``import typedlm.cli`` (fast ``--help``), ``--version``, exit codes 0 / 2 / 3."""

import json
import subprocess
import sys

from typer.testing import CliRunner

from typedlm import __version__
from typedlm.cli import app
from typedlm.cli.util import EXIT_BAD_INPUT, EXIT_INCOMPLETE

runner = CliRunner()
HEAVY = ("torch", "transformers", "xgrammar")


def test_import_cli_loads_no_heavy_module():
    code = ("import sys, typedlm.cli; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"import typedlm.cli imported {out}"


def test_help_runs_without_heavy_modules():
    """`typedlm --help` and a command's --help build the whole command tree without torch."""
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom typedlm.cli import app\n"
            "for args in (['--help'], ['serve', '--help'], ['decide', '--help'], ['bench', '--help']):\n"
            "    r = CliRunner().invoke(app, args)\n    assert r.exit_code == 0, (args, r.output)\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"--help imported {out}"


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout.strip() == f"typedlm {__version__}"


def test_exit_codes_are_the_documented_ones():
    assert (EXIT_BAD_INPUT, EXIT_INCOMPLETE) == (2, 3)


def test_truncated_output_exits_3_and_still_prints(tiny_dir):
    r = runner.invoke(app, ["generate", "--model", str(tiny_dir), "--json-object", "--max-tokens", "2", "--json", "q"])
    assert r.exit_code == EXIT_INCOMPLETE, r.output
    d = json.loads(r.stdout)
    assert d["finish_reason"] == "length" and d["schema_valid"] is False
    assert "cut at --max-tokens" in r.stderr


def test_schema_invalid_output_exits_3(tiny_dir, tmp_path):
    """--lenient compiles a schema with a keyword the grammar does not enforce (`not`). The greedy output
    under the enforceable part is learnt first; `not: {const: <it>}` then forbids exactly it (the schema
    stays satisfiable: three other arrays), and the exit code reports the schema-invalid output."""
    base = {"type": "array", "items": {"enum": [1, 2]}, "minItems": 2, "maxItems": 2}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(base))
    args = ["generate", "--model", str(tiny_dir), "--lenient", "--compact", "--max-tokens", "16", "--json", "q"]
    r = runner.invoke(app, [*args[:-2], "--json-schema", str(f), *args[-2:]])
    assert r.exit_code == 0, r.output
    greedy = json.loads(json.loads(r.stdout)["text"])
    f.write_text(json.dumps({**base, "not": {"const": greedy}}))
    r = runner.invoke(app, [*args[:-2], "--json-schema", str(f), "q"])
    assert r.exit_code == EXIT_INCOMPLETE, r.output
    assert "schema_valid=False" in r.stderr and "not valid against the schema" in r.stderr
    assert json.loads(r.stdout) == greedy, "the text is still printed"


def test_complete_valid_output_exits_0(tiny_dir):
    r = runner.invoke(app, ["generate", "--model", str(tiny_dir), "--choice", "yes", "--choice", "no", "q"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() in ("yes", "no")
