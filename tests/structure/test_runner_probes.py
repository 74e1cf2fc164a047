"""Runner capabilities are declared (``runner.capabilities``), never probed: no ``hasattr`` / ``getattr`` whose
object is a runner, a KV book or its forwards anywhere in typedlm/."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "typedlm"
NAMES = ("runner", "kv", "forwards", "book")


def probes(source: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr") \
                and node.args:
            target = ast.unparse(node.args[0])
            last = target.rsplit(".", 1)[-1]
            if any(last == n or last.endswith("_" + n) or last.startswith(n + "_") for n in NAMES):
                out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_runner_is_probed():
    found = {str(p.relative_to(PKG.parent)): hits for p in sorted(PKG.rglob("*.py"))
             for hits in [probes(p.read_text())] if hits}
    assert found == {}


def test_the_check_sees_a_probe():
    src = "a = getattr(engine.runner, 'invariant', False)\nb = hasattr(self.kv, 'x')\nc = getattr(body, 'n')\n"
    assert [h.split(":")[0] for h in probes(src)] == ["1", "2"]
