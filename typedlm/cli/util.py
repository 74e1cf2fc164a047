"""Shared CLI plumbing: one-line errors with exit code 2, reading files, printing JSON.

Exit codes (README "Exit codes"): 0 ok, ``EXIT_BAD_INPUT`` 2, ``EXIT_INCOMPLETE`` 3 (output truncated or
not schema-valid)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import typer

from ..errors import TypedLMError

EXIT_BAD_INPUT = 2
EXIT_INCOMPLETE = 3


def backend_option():
    """``--backend`` of every command that loads a model (``load_engine(backend=...)``)."""
    return typer.Option(None, "--backend", help="auto | torch | mlx (default: TYPEDLM_BACKEND, else auto: MLX on "
                                                "Apple Silicon when mlx-lm is installed)")


def deterministic_option():
    """``--deterministic/--no-deterministic`` (``load_engine(deterministic=...)``)."""
    return typer.Option(None, "--deterministic/--no-deterministic",
                        help="batch-invariant kernels for decisions and generation: a row's results are the same "
                             "bits whatever else shares the batch. Default: decisions only (no near-tie rescoring), "
                             "generation on the fast kernels; --no-deterministic: neither")


def grammar_engine_option():
    """``--grammar-engine`` (``Grammars(engine=...)``: which engine compiles JSON constraints)."""
    return typer.Option(None, "--grammar-engine",
                        help="handoff | xgrammar | llguidance | auto: the engine for JSON Schema constraints (handoff: "
                             "llguidance at once, xgrammar once compiled in the background; auto: llguidance where "
                             "it reads the normalized schema exactly, else xgrammar). Default: "
                             "TYPEDLM_GRAMMAR_ENGINE, else handoff")


def fail(reason: str) -> "typer.Exit":
    """Print a one-line reason to stderr and exit 2 (bad input)."""
    typer.echo(f"error: {' '.join(str(reason).split())}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


@contextlib.contextmanager
def user_errors():
    """Turn typedlm's own errors (and bad values) into exit 2 with a one-line reason."""
    try:
        yield
    except (TypedLMError, ValueError, OSError) as e:
        fail(str(e) or type(e).__name__)


def read_text(path: Path, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        fail(f"cannot read {what} file '{path}': {e.strerror or e}")


def read_json(path: Path, what: str):
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"{what} file '{path}' is not valid JSON: {e}")


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


def write_json(path: Path, obj) -> None:
    """Write ``obj`` as indented JSON (folders made as needed); an unwritable path exits 2."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    except OSError as e:
        fail(f"cannot write '{path}': {e.strerror or e}")
