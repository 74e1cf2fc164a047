"""Compiled xgrammar grammars persist on disk: a fresh compiler (new process-level state) loads them and its
masks are the same; a corrupt or foreign entry is ignored and rewritten; the directory stays under its bound."""

import json

import pytest
import torch

from typedlm.grammar.backends.disk_cache import SUFFIX
from typedlm.grammar.backends.masks import allocate
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.controller import accepts_text
from typedlm.grammar.spec import make_constraint

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 6},
                                           "n": {"type": "integer", "minimum": 3, "multipleOf": 3}},
          "required": ["name", "n"]}
TEXT = '{"name":"abc","n":9}'


def _constraint(schema=SCHEMA):
    return make_constraint(json_schema=schema, any_whitespace=False)


def _masks(compiled, text: str, vocab_size: int) -> list[torch.Tensor]:
    """The mask before each character of ``text`` (advanced over it one character at a time)."""
    state = compiled.new_state()
    out = []
    for ch in text:
        mask = allocate(1, vocab_size)
        state.fill_mask(mask, 0)
        out.append(mask)
        assert state.accept_text(ch)
    return out


class _Fresh(Grammars):
    """A compiler with its own process-level state whose compiles return once their disk entry is written."""

    def compile(self, c, **kw):
        out = super().compile(c, **kw)
        self.flush()
        return out


def _fresh(tiny, directory, **kw) -> Grammars:
    return _Fresh(tiny.grammars.tokenizer_info, cache_dir=directory, cache_min_s=0.0, **kw)


def test_a_fresh_compiler_loads_the_grammar_from_disk(tiny, tmp_path):
    first, _ = _fresh(tiny, tmp_path).compile(_constraint())
    files = list(tmp_path.glob(f"*{SUFFIX}"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    second_compiler = _fresh(tiny, tmp_path)
    second, _ = second_compiler.compile(_constraint())
    assert second is not first and second_compiler.stats.misses == 1  # its own memory cache was empty
    assert list(tmp_path.glob(f"*{SUFFIX}")) == files and files[0].stat().st_mtime_ns >= stamp
    assert accepts_text(second, TEXT) and not accepts_text(second, '{"name":"abc","n":10}')
    vocab_size = tiny.grammars.tokenizer_info.vocab_size
    for a, b in zip(_masks(first, TEXT, vocab_size), _masks(second, TEXT, vocab_size), strict=True):
        assert torch.equal(a, b)


def test_the_disk_hit_is_what_was_stored(tiny, tmp_path):
    """The second compiler reads the file: replacing it by another grammar's entry changes what it loads."""
    _fresh(tiny, tmp_path).compile(_constraint())
    other = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    _fresh(tiny, tmp_path / "other").compile(_constraint(other))
    [mine] = tmp_path.glob(f"*{SUFFIX}")
    [theirs] = (tmp_path / "other").glob(f"*{SUFFIX}")
    mine.write_text(theirs.read_text())
    loaded, _ = _fresh(tiny, tmp_path).compile(_constraint())
    assert accepts_text(loaded, '{"x":1}') and not accepts_text(loaded, TEXT)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "version"])
def test_a_corrupt_entry_is_ignored_and_rewritten(tiny, tmp_path, damage):
    _fresh(tiny, tmp_path).compile(_constraint())
    [path] = tmp_path.glob(f"*{SUFFIX}")
    good = path.read_text()
    if damage == "truncate":
        path.write_text(good[: len(good) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\xff\x00not json")
    else:
        doc = json.loads(good)
        doc["__VERSION__"] = "v0-not-this-one"
        path.write_text(json.dumps(doc))
    compiled, _ = _fresh(tiny, tmp_path).compile(_constraint())
    assert accepts_text(compiled, TEXT) and not accepts_text(compiled, '{"name":"ABC","n":9}')
    assert path.read_text() == good  # compiled again and rewritten


def test_the_directory_stays_under_its_bound(tiny, tmp_path):
    """Past ``cache_bytes`` the least recently used entries go (a hit counts as a use)."""
    def schema(i):
        return _constraint({"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]})

    _fresh(tiny, tmp_path / "probe").compile(schema(0))
    [probe] = (tmp_path / "probe").glob(f"*{SUFFIX}")
    size = probe.stat().st_size
    directory = tmp_path / "bounded"
    seen = []
    for i in (0, 1, 0, 2):  # k0 used again after k1: k1 is the least recently used when k2 comes
        _fresh(tiny, directory, cache_bytes=int(2.5 * size)).compile(schema(i))
        seen.append({p.name for p in directory.glob(f"*{SUFFIX}")})
    k0 = seen[0]
    k1 = seen[1] - k0
    assert len(seen[2]) == 2 and len(seen[3]) == 2
    assert k0 <= seen[3] and not k1 & seen[3]


def test_no_directory_no_files(tiny, tmp_path):
    Grammars(tiny.grammars.tokenizer_info).compile(_constraint())
    assert not list(tmp_path.iterdir())


def test_a_fast_compile_is_not_written(tiny, tmp_path):
    """Reading an entry back costs about what a small grammar's compile does: below ``cache_min_s`` none is written."""
    g = Grammars(tiny.grammars.tokenizer_info, cache_dir=tmp_path, cache_min_s=60.0)
    g.compile(_constraint())
    g.flush()
    assert not list(tmp_path.glob(f"*{SUFFIX}"))


def test_the_settings_name_the_directory(tmp_path):
    from typedlm.config import Settings

    assert Settings(cache=tmp_path).grammars_dir == tmp_path / "grammars"
    assert Settings(grammar_cache_dir=tmp_path / "g").grammars_dir == tmp_path / "g"
    assert Settings(grammar_cache=False).grammars_dir is None
