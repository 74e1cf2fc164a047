"""The documentation's examples run: every fenced ``python`` block marked ``<!-- doc-test -->`` in docs/ is executed
against the tiny random-weight model (``load_engine`` returns it, whatever the reference), so a guide cannot drift
from the API. A random model says anything its grammar allows: the examples must run, not say something particular."""

import contextlib
import io
import re
from pathlib import Path

import pytest

import typedlm.engine

DOCS = Path(__file__).resolve().parents[2] / "docs"
MARK = "<!-- doc-test -->"
BLOCK = re.compile(r"^" + re.escape(MARK) + r"[ \t]*\n```python\n(.*?)\n```", re.S | re.M)


def marked_blocks(root: Path) -> list[tuple[str, str]]:
    """``(where, code)`` of every marked python block under ``root``; ``where`` is ``page.md:line``. A marker line
    not followed by a python block is an error (it would silently test nothing); a marker inside prose is text."""
    out = []
    for page in sorted(root.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        found = list(BLOCK.finditer(text))
        if len(found) != sum(line.rstrip() == MARK for line in text.splitlines()):
            raise ValueError(f"{page}: a {MARK} marker is not followed by a ```python block")
        out += [(f"{page.relative_to(root)}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1)) for m in found]
    return out


BLOCKS = marked_blocks(DOCS)


def run_block(code: str, engine, monkeypatch) -> str:
    """Execute one block as a fresh module with ``load_engine`` answering ``engine``; returns what it printed."""
    monkeypatch.setattr(typedlm.engine, "load_engine", lambda *a, **k: engine)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<doc example>", "exec"), {"__name__": "__doc_example__"})
    return out.getvalue()


def test_the_guides_have_runnable_examples():
    pages = {where.split(":")[0] for where, _ in BLOCKS}
    assert {"getting-started.md", "guides/constrained-generation.md", "guides/decisions.md",
            "guides/json-schema.md"} <= pages, pages


@pytest.mark.parametrize("code", [c for _, c in BLOCKS], ids=[w for w, _ in BLOCKS])
def test_example_runs(code, tiny, monkeypatch):
    printed = run_block(code, tiny, monkeypatch)
    if "print(" in code:
        assert printed.strip(), "the example printed nothing"


def test_a_block_that_calls_a_missing_api_fails(tiny, monkeypatch, tmp_path):
    (tmp_path / "page.md").write_text(f"{MARK}\n```python\nfrom typedlm.generate import no_such_function\n```\n")
    [(where, code)] = marked_blocks(tmp_path)
    assert where == "page.md:1"
    with pytest.raises(ImportError, match="no_such_function"):
        run_block(code, tiny, monkeypatch)


def test_a_marker_without_a_python_block_is_refused(tmp_path):
    (tmp_path / "page.md").write_text(f"{MARK}\n```bash\ntypedlm --help\n```\n")
    with pytest.raises(ValueError, match="not followed"):
        marked_blocks(tmp_path)
