"""Configuration is parsed once: only typedlm/config.py touches ``os.environ`` / ``os.getenv``, and nothing in
typedlm writes the environment except that module (the tokenizers' fork warning)."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "typedlm"


def _env_uses(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv"):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                a.name in ("environ", "getenv", "putenv") for a in node.names):
            lines.append(node.lineno)
    return lines


def test_no_environment_outside_the_config_module():
    found = {str(p.relative_to(PKG.parent)): lines for p in sorted(PKG.rglob("*.py"))
             if p.name != "config.py" or p.parent != PKG
             for lines in [_env_uses(p)] if lines}
    assert found == {}


def test_the_check_sees_an_environment_read(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import os\nx = os.environ.get('A')\nfrom os import getenv\n")
    assert sorted(_env_uses(p)) == [2, 3]
