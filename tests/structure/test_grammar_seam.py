"""The grammar layer's seam: one typed IR (no private ``x-typedlm-*`` keyword written into or read back from a
schema dict), one relaxation (``grammar/schema/weaken.py``; ``grammar/relax.py`` is gone), and no ``isinstance``
on an engine's own types outside ``typedlm/grammar/backends/``."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "typedlm"
ENGINES = ("xgrammar", "llguidance")


def _engine_isinstance(source: str) -> list[int]:
    """Lines of ``isinstance``/``issubclass`` calls whose class argument names an engine module's type."""
    tree = ast.parse(source)
    modules, names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name.split(".")[0] in ENGINES}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ENGINES:
            names |= {a.asname or a.name for a in node.names}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
            for sub in ast.walk(node.args[1]):
                if (isinstance(sub, ast.Name) and sub.id in names) or (
                        isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in modules):
                    lines.append(node.lineno)
                    break
    return lines


def test_no_private_keyword_in_the_package():
    found = [str(p.relative_to(PKG.parent)) for p in sorted(PKG.rglob("*.py")) if "x-typedlm-" in p.read_text()]
    assert found == []


def test_one_relaxation():
    assert not (PKG / "grammar" / "relax.py").exists()
    assert (PKG / "grammar" / "schema" / "weaken.py").exists()


def test_no_isinstance_on_engine_types_outside_the_backends():
    backends = PKG / "grammar" / "backends"
    found = {str(p.relative_to(PKG.parent)): lines for p in sorted(PKG.rglob("*.py"))
             if backends not in p.parents for lines in [_engine_isinstance(p.read_text())] if lines}
    assert found == {}


def test_the_check_sees_an_engine_isinstance():
    src = ("import xgrammar as xgr\nfrom llguidance import LLMatcher\nimport json\n"
           "isinstance(a, xgr.CompiledGrammar)\nisinstance(b, (int, LLMatcher))\nisinstance(c, json.JSONDecoder)\n")
    assert _engine_isinstance(src) == [4, 5]
