"""Package structure: no import cycle between files, the package root shadows no subpackage, the
version is reported, and docs/ARCHITECTURE.md names only paths that exist."""

import ast
import re
import types
from pathlib import Path

from typer.testing import CliRunner

import typedlm

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "typedlm"


def import_graph(pkg: Path) -> dict[str, set[str]]:
    """Module -> in-package modules it imports (module level and function level alike, like
    ``/work/shared/tools/import-cycles``). The package root itself is not an edge target."""
    mods = {}
    for p in pkg.rglob("*.py"):
        rel = p.relative_to(pkg.parent).with_suffix("")
        mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = p
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        base = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = base.split(".")
                    mod = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            else:
                continue
            edges[m].update(t for t in targets if t in mods and t not in (m, pkg.name))
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None (iterative DFS, three colours)."""
    colour = dict.fromkeys(edges, 0)
    for start in sorted(edges):
        if colour[start]:
            continue
        path, stack = [start], [iter(sorted(edges[start]))]
        colour[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = 2
                stack.pop()
            elif colour[nxt] == 1:
                return path[path.index(nxt):] + [nxt]
            elif colour[nxt] == 0:
                colour[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(edges[nxt])))
    return None


def test_no_import_cycle_between_files():
    edges = import_graph(PKG)
    assert "typedlm.server.decide_routes" in edges["typedlm.server.app"]  # the walk sees real imports
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges))


def test_the_cycle_finder_finds_a_function_level_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from .b import f\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..sub import a\n")
    assert find_cycle(import_graph(pkg)) in (["pkg.sub.a", "pkg.sub.b", "pkg.sub", "pkg.sub.a"],
                                             ["pkg.sub.a", "pkg.sub.b", "pkg.sub.a"])


def test_package_root_shadows_no_subpackage():
    import typedlm.cli  # noqa: F401 - imports every feature module
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
