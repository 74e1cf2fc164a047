"""Package structure: the package root shadows no subpackage, the version is reported, docs/ARCHITECTURE.md
names only paths that exist, and the schema normalizer's shape (imports and sizes: tests/structure/)."""

import ast
import re
import types
from pathlib import Path

from typer.testing import CliRunner

import typedlm

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "typedlm"


def test_package_root_shadows_no_subpackage():
    import typedlm.cli  # noqa: F401 - imports every command module
    import typedlm.server.app  # noqa: F401

    assert isinstance(typedlm.generate, types.ModuleType) and isinstance(typedlm.decide, types.ModuleType)
    from typedlm.decide import decide
    from typedlm.generate import generate

    assert callable(generate) and callable(decide)


def test_version_flag():
    from typedlm.cli import app

    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"typedlm {typedlm.__version__}"


PATH_RE = re.compile(r"`((?:typedlm|bench|tests|docs|\.ci)/[^`\s]*|README\.md|Makefile|pyproject\.toml)`")


def test_architecture_names_only_existing_paths():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert len(text.encode()) <= 15_000, "ARCHITECTURE.md is a short map: keep it under 15 KB"
    named = set(PATH_RE.findall(text))
    assert len(named) > 20, named  # the map names the modules
    missing = sorted(p for p in named if not (ROOT / p.split("::")[0].rstrip("/")).exists())
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


# -- layering and size rules (issue 18) ---------------------------------------------------------------
MATCHER_NAMES = {"GrammarMatcher", "BatchGrammarMatcher", "matcher", "fill_next_token_bitmask",
                 "batch_fill_next_token_bitmask", "find_jump_forward_string", "accept_token", "rollback",
                 "is_completed", "is_terminated", "apply_token_bitmask_inplace", "_state"}


def matcher_touches(path: Path) -> list[str]:
    """Names of xgrammar matcher APIs (or GrammarRow internals) a module uses, as ``line: name``."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in MATCHER_NAMES:
            hits.append(f"{node.lineno}: {name}")
    return hits


def test_only_the_grammar_package_touches_an_xgrammar_matcher():
    outside = {str(p.relative_to(ROOT)): matcher_touches(p) for p in PKG.rglob("*.py")
               if p.relative_to(PKG).parts[0] != "grammar"}
    assert not {k: v for k, v in outside.items() if v}


def test_the_matcher_check_sees_a_leak(tmp_path):
    leak = tmp_path / "leak.py"
    leak.write_text("def f(row):\n    return row.matcher.find_jump_forward_string()\n")
    assert matcher_touches(leak) == ["2: find_jump_forward_string", "2: matcher"]


MAX_SCHEMA_CLASS_LINES = 300


def test_no_large_class_in_the_schema_normalizer():
    """grammar/schema/ stays readable: no class over 300 lines (the normalizer's roles live in their own
    modules as plain functions, not in one growing mixin)."""
    import ast

    big = []
    for f in sorted((ROOT / "typedlm" / "grammar" / "schema").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_SCHEMA_CLASS_LINES:
                big.append(f"{f.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not big, big


def test_schema_classes_call_only_their_own_members():
    """grammar/schema/ has no mixins: a method reaches only what its own class defines through ``self``
    (methods, fields, attributes it assigns); another part of a normalization is named explicitly
    (``self.n.algebra.intersect``), so the call graph between the parts is visible."""
    import ast

    stray = []
    for f in sorted((ROOT / "typedlm" / "grammar" / "schema").glob("*.py")):
        for cls in [n for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.ClassDef)]:
            own = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            own |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
            own |= {t.attr for n in ast.walk(cls) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                    for target in (n.targets if isinstance(n, ast.Assign) else [n.target]) for t in ast.walk(target)
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
            used = {n.attr for n in ast.walk(cls)
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}
            stray += [f"{f.name}:{cls.name}.{name}" for name in sorted(used - own)]
    assert not stray, stray


def test_bench_results_hold_current_files_only():
    """``bench/results/``: at most 3 MB, and no raw per-case files (predictions, journals, scores: their command
    writes them again)."""
    results = ROOT / "bench" / "results"
    files = [p for p in results.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 3_000_000
    assert [p.name for p in files if p.suffix == ".jsonl"] == []
