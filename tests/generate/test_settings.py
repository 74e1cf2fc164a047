"""typedlm.config: one Settings object (arguments > environment > config file > defaults), carried by the Engine
to the runner, the KV caches and the grammar compiler."""

import pytest

from typedlm import config
from typedlm.config import ConfigError, resolve
from typedlm.testing import tiny_engine


def test_precedence_arguments_env_file_default(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[engine]\nkv_len = 512\ncompile_timeout = 3\ngrammar_engine = "auto"\n')
    s = resolve({"kv_len": 1024}, config_file=f, env={"TYPEDLM_COMPILE_TIMEOUT": "7", "TYPEDLM_GRAMMAR": "off"})
    assert (s.kv_len, s.compile_timeout, s.grammar_engine, s.grammar) == (1024, 7.0, "auto", False)
    assert resolve(env={}).kv_len == 4096 and resolve(env={}).batch_invariant is None
    assert resolve(env={"TYPEDLM_CONFIG": str(f)}).kv_len == 512  # the file named by the environment


@pytest.mark.parametrize("env, message", [
    ({"TYPEDLM_KV_LEN": "lots"}, "TYPEDLM_KV_LEN='lots'"),
    ({"TYPEDLM_GRAMMAR_ENGINE": "outlines"}, "TYPEDLM_GRAMMAR_ENGINE='outlines'"),
    ({"TYPEDLM_PREFIX_CACHE_GB": "-1"}, "TYPEDLM_PREFIX_CACHE_GB='-1'"),
])
def test_a_bad_value_names_its_variable(env, message):
    with pytest.raises(ConfigError, match=message):
        resolve(env=env)


def test_a_bad_file_key_and_a_bad_argument_are_named(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[engine]\nkv_size = 3\n")
    with pytest.raises(ConfigError, match="unknown key \\[engine\\] 'kv_size'"):
        resolve(config_file=f, env={})
    with pytest.raises(ConfigError, match="backend='jax'"):
        resolve(env={}).replace(backend="jax")


def test_the_engine_carries_its_settings_to_the_runner_and_grammars():
    s = resolve({"kv_len": 96, "compile_timeout": 2.5, "prefix_cache_gb": 0.25}, env={})
    engine = tiny_engine(settings=s)
    assert engine.settings is s
    assert engine.runner.kv_len == 96 and engine.runner.decode_cache(2).max_len == 96
    assert engine.grammars.timeout_s == 2.5
    assert engine.runner.prefix_cache.limit_bytes == int(0.25 * (1 << 30))


def test_the_grammar_size_cap_and_disk_cache_reach_the_xgrammar_backend(tmp_path):
    s = resolve({"max_grammar_bytes": 12345, "grammar_cache_dir": tmp_path, "grammar_cache_mb": 2}, env={})
    backend = tiny_engine(settings=s).grammars._backend("xgrammar")
    assert backend.max_grammar_bytes == 12345
    assert backend.disk.directory == tmp_path and backend.disk.max_bytes == 2 << 20
    off = resolve(env={"TYPEDLM_GRAMMAR_CACHE": "off"})
    assert off.grammars_dir is None and tiny_engine(settings=off).grammars._backend("xgrammar").disk is None


def test_configure_replaces_the_process_settings(monkeypatch):
    monkeypatch.setattr(config, "_CURRENT", [])
    first = config.settings()
    new = first.replace(kv_len=128)
    assert config.configure(new) is first and config.settings() is new
