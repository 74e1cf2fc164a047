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
                # ``from pkg import sub`` imports the module pkg.sub (and runs pkg's __init__, which
                # imports nothing of what imports it: an __init__ is a package's front, not its user)
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names]
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


def test_engine_imports_nothing_from_generate_or_decide():
    edges = import_graph(PKG)["typedlm.engine"]
    assert edges and not {e for e in edges if e.startswith(("typedlm.generate", "typedlm.decide"))}, edges


def test_runner_imports_nothing_above_it():
    edges = import_graph(PKG)
    above = ("typedlm.engine", "typedlm.generate", "typedlm.decide", "typedlm.server", "typedlm.grammar")
    for mod, targets in edges.items():
        if mod.startswith("typedlm.runner"):
            assert not {t for t in targets if t.startswith(above)}, (mod, targets)


def long_functions(path: Path, limit: int) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
            out.append(f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    return out


def test_files_and_engine_functions_stay_small():
    big = [f"{p.relative_to(ROOT)} ({n} lines)" for p in PKG.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > 500]
    assert not big, big
    hot = [*(PKG / "runner").glob("*.py"), PKG / "generate" / "scheduler.py", PKG / "generate" / "sampler.py"]
    assert not [f for p in hot for f in long_functions(p, 80)]


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
