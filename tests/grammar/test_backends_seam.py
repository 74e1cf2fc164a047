"""The engine seam (``typedlm/grammar/backends/``): only the backends know an engine's types, and every
backend's row state behaves alike (fill, accept, rollback, can-end, jump string) on one schema."""

import ast
from pathlib import Path

import pytest
import torch

from typedlm.grammar.backends import masks
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.controller import accepts_text
from typedlm.grammar.spec import make_constraint

PKG = Path(__file__).resolve().parents[2] / "typedlm"
BACKENDS = PKG / "grammar" / "backends"
ENGINE_MODULES = ("xgrammar", "llguidance")
# outside the backends, xgrammar only as the vocabulary description (compiler) and the EBNF the schema emitter
# builds on (schema/ebnf.py); bench/ compares raw engines on purpose
XGRAMMAR_ALLOWED = {"grammar/compiler.py", "grammar/schema/ebnf.py"}


def _outside_backends():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if not rel.startswith(("grammar/backends/", "bench/")):
            yield rel, ast.parse(path.read_text())


def _engine_names(tree: ast.AST) -> set[str]:
    """Local names bound to an engine module or to anything imported from one or from the backends' modules."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in ENGINE_MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module and (
                node.module.split(".")[0] in ENGINE_MODULES or "backends." in node.module + "."):
            names |= {a.asname or a.name for a in node.names}
    return names


def isinstance_on_engine_types(tree: ast.AST) -> list[str]:
    engine = _engine_names(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass") \
                and len(node.args) == 2:
            used = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            if used & engine or any(n.endswith(("Grammar", "Matcher", "LLGuidance", "XGrammar")) for n in used):
                hits.append(f"{node.lineno}: {ast.unparse(node)}")
    return hits


def test_no_isinstance_on_an_engines_types_outside_the_backends():
    found = {rel: hits for rel, tree in _outside_backends() if (hits := isinstance_on_engine_types(tree))}
    assert not found


def test_the_isinstance_check_sees_a_leak():
    tree = ast.parse("import xgrammar as xgr\ndef f(c):\n    return isinstance(c, xgr.CompiledGrammar)\n")
    assert isinstance_on_engine_types(tree) == ["3: isinstance(c, xgr.CompiledGrammar)"]


def test_only_the_backends_import_an_engine():
    found = {}
    for rel, tree in _outside_backends():
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for m in mods:
                top = m.split(".")[0]
                if top == "llguidance" or (top == "xgrammar" and rel not in XGRAMMAR_ALLOWED):
                    found.setdefault(rel, []).append(f"{node.lineno}: {m}")
    assert not found


@pytest.fixture(scope="module")
def compiled(tiny):
    schema = {"type": "object", "properties": {"k": {"enum": ["ab", "cd"]}}, "required": ["k"],
              "additionalProperties": False}
    c = make_constraint(json_schema=schema, any_whitespace=False)
    return {e: Grammars(tiny.grammars.tokenizer_info, engine=e).compile(c)[0] for e in ("xgrammar", "llguidance")}


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_every_backend_row_state_behaves_alike(compiled, tiny, engine):
    g = compiled[engine]
    assert g.engine == engine
    s = g.new_state()
    assert s.jump_string() == '{"k":"' and not s.can_end()
    ids = tiny.tokenizer.encode('{"k":"ab"}', add_special_tokens=False)
    assert s.accept(ids) and s.can_end()  # terminated here too where the engine knows only a stop may follow
    s.rollback(len(ids))
    assert not s.can_end() and s.accept_text('{"k":"cd"}') and s.can_end()
    mask = masks.allocate(2, tiny.model_vocab_size)
    s.fill_mask(mask, 1)
    allowed = torch.zeros(1, tiny.model_vocab_size)
    masks.apply(allowed, mask[1:2], vocab_size=tiny.model_vocab_size)
    assert set(torch.isfinite(allowed[0]).nonzero().flatten().tolist()) == set(s.stop_ids) & set(range(tiny.model_vocab_size))
    assert s.accept([s.stop_ids[0]]) and s.is_terminated()
    assert accepts_text(g, '{"k":"ab"}') and not accepts_text(g, '{"k":"ef"}')
