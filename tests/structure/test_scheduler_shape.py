"""The scheduler's shape (issue 34): decisions reach the model only as work of the engine's steps, so the side
channels are gone (no decide modes, no layer hooks, no proxy engine, no switch interval), and ``Scheduler.step``
stays a few calls. (No ``hasattr``/``getattr`` on a runner: ``test_runner_probes.py``.)"""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "typedlm"
GONE = ("server/interleave.py", "server/slices.py")
SIDE_CHANNELS = ("register_forward_pre_hook", "setswitchinterval", "side_work", "SteppedEngine", "decide_mode",
                 "run_stepwise")
MAX_STEP_LINES = 12


def _class(path: Path, cls: str) -> ast.ClassDef:
    return next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == cls)


def _method(path: Path, cls: str, name: str) -> ast.FunctionDef:
    return next(n for n in _class(path, cls).body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_the_side_channel_modules_are_gone():
    assert [p for p in GONE if (PKG / p).exists()] == []


def test_no_side_channel_is_named_in_the_package():
    found = {str(p.relative_to(PKG)): [w for w in SIDE_CHANNELS if w in p.read_text()] for p in PKG.rglob("*.py")}
    assert {k: v for k, v in found.items() if v} == {}


def test_step_is_at_most_twelve_lines():
    step = _method(PKG / "generate" / "scheduler.py", "Scheduler", "step")
    assert step.end_lineno - step.lineno + 1 <= MAX_STEP_LINES


def test_the_engine_has_no_proxy_and_the_scheduled_runner_no_fallback_attribute_lookup():
    for path, cls in ((PKG / "engine.py", "Engine"), (PKG / "generate" / "scheduled.py", "ScheduledRunner")):
        assert not [n.name for n in _class(path, cls).body if isinstance(n, ast.FunctionDef)
                    and n.name in ("__getattr__", "__getattribute__")], cls
