"""The ``typedlm`` typer app: every command's module is added here, in the order ``--help`` lists them.

Exit codes: 0 ok; 2 bad input (one-line reason on stderr, :func:`typedlm.cli.util.fail`); 3 the output is
incomplete: cut at ``--max-tokens`` or not valid against its schema (``typedlm generate``; the text is
still printed). Importing this package must stay light (no torch, transformers or xgrammar; pinned by
``tests/test_cli_ux.py``): every command imports what it needs inside its body, so ``--help`` is fast."""

from __future__ import annotations

import typer

from .. import __version__
from .bench import app as bench_app
from .calibrate import calibrate
from .decide import decide
from .doctor import doctor
from .eval import eval_cmd
from .generate import generate
from .models import app as models_app
from .report import report_cmd
from .select import select_cmd
from .serve import serve
from .validate import validate

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="typedlm: typed outputs from local language models.")
app.add_typer(bench_app, name="bench")
app.add_typer(models_app, name="models")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"typedlm {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="print the version and exit")):
    """typedlm: typed outputs from local language models."""


app.command()(generate)
app.command()(doctor)
app.command()(serve)
app.command()(decide)
app.command()(calibrate)
app.command()(validate)
app.command("eval")(eval_cmd)
app.command("select")(select_cmd)
app.command("report")(report_cmd)
