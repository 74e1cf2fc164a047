"""MkDocs hook: the CLI reference page (``reference/cli.md``) gets every command and option of the
``typedlm`` console script, generated from its typer app at build time, so it cannot drift from the code."""

import importlib
import tomllib
from pathlib import Path

import typer
import typer.cli
import typer.main

MARKER = "<!-- cli-reference -->"
ROOT = Path(__file__).resolve().parents[2]


def cli_markdown() -> str:
    """The typer app named by ``[project.scripts] typedlm`` in pyproject.toml, as Markdown (headings one level down)."""
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["typedlm"]
    module, attr = target.split(":")
    command = typer.main.get_command(getattr(importlib.import_module(module), attr))
    text = typer.cli.get_docs_for_click(obj=command, ctx=typer.Context(command), name="typedlm")
    return "\n".join("#" + line if line.startswith("#") else line for line in text.splitlines())


def on_page_markdown(markdown: str, page, **_) -> str:
    if page.file.src_uri != "reference/cli.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"reference/cli.md lost its {MARKER} marker")
    return markdown.replace(MARKER, cli_markdown())
