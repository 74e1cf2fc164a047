"""One configuration object, parsed once at start-up: the only module that reads the environment.

Sources, merged field by field (highest first): **arguments** (``load_engine(..., settings=...)``,
``typedlm serve`` flags) > **environment** (``TYPEDLM_<FIELD>`` in upper case) > **config file** (TOML: its
``[engine]`` table, keys named like the fields; the file is ``config_file`` or ``TYPEDLM_CONFIG``) > default.
A bad value is a :class:`ConfigError` naming the field and its source.

:func:`settings` is the process's object (parsed from the environment on first use, replaced with
:func:`configure` by a command that parsed its own); the Engine carries the one it was loaded with
(``engine.settings``) down to the runner, the KV caches and the grammar compiler.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import TypedLMError

ENV_PREFIX = "TYPEDLM_"
CONFIG_ENV = "TYPEDLM_CONFIG"  # a TOML file whose [engine] table holds these settings
FILE_TABLE = "engine"
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # where inductor (torch.compile) keeps its compiled kernels
# The EBNF size cap's default (bytes): xgrammar precomputes the masks of larger grammars for tens of seconds
# (a MaskBench sample by size: bench/xgrammar_compile.py).
MAX_GRAMMAR_BYTES = 120_000


class ConfigError(TypedLMError):
    """A settings value (argument, environment or config file) is invalid; the message names field and source."""


class Settings(BaseModel):
    """Engine-wide settings (the table in docs/ARCHITECTURE.md, "Configuration")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["auto", "torch", "mlx"] = "auto"  # auto: MLX on Apple Silicon with mlx-lm, else torch
    kv_len: int = Field(4096, ge=16)  # tokens a static KV slot holds (prompt + output), at most the context
    batch_invariant: bool | None = None  # batch-invariant scoring; None: on CUDA, off on the CPU
    compile_decode: bool = True  # torch.compile the CUDA decode layer
    compile_cache_dir: Path | None = None  # inductor's kernel cache (reused across restarts); None: <cache>/inductor
    compile_threads: int | None = Field(None, ge=1)  # inductor's compile workers; None: torch's default (the cores)
    release_compile_workers: bool = True  # shut the compile workers down after a warm-up / capture
    short_prefill: bool = True  # short prefills as CUDA graphs
    score_graph: bool = True  # a decision's invariant pass as a CUDA graph
    score_graph_fused: bool = True  # that graph with fused q/k/v and gate/up GEMMs
    prefix_cache_gb: float | None = Field(None, ge=0)  # None: 10 % of a GPU (at most 16 GB), 1 GB on the CPU
    grammar: bool = True  # False: grammar compilation off (the kill switch)
    compile_timeout: float = Field(20.0, gt=0)  # seconds one grammar compile may take
    grammar_engine: Literal["handoff", "xgrammar", "llguidance", "auto"] = "handoff"  # JSON constraints' engine
    llg_threads: int | None = Field(None, ge=1)  # llguidance's mask threads; None: its default
    max_grammar_bytes: int | None = Field(MAX_GRAMMAR_BYTES, ge=1)  # xgrammar's EBNF past this: refused; None: no cap
    grammar_cache: bool = True  # compiled xgrammar grammars persist on disk (across restarts)
    grammar_cache_dir: Path | None = None  # None: <cache>/grammars
    grammar_cache_mb: float = Field(1024.0, gt=0)  # the disk cache's bound (least recently used files go)
    overlap_schedule: bool = True  # the scheduler's overlapped step (forward queued before the host's update)
    step_tokens: int = Field(128, ge=1)  # tokens one scheduler step carries: decode rows, then decisions' work
    step_forwards: int = Field(1, ge=1)  # decisions' forwards one step carries beside decode rows (every other step)
    mixed_step: bool = False  # a decision's chunk rides in the decode step's forward (runner/mixed.py; opt-in)
    cache: Path | None = None  # model conversion cache; None: $XDG_CACHE_HOME/typedlm or ~/.cache/typedlm

    @property
    def cache_dir(self) -> Path:
        return self.cache if self.cache is not None else Path.home() / ".cache" / "typedlm"

    @property
    def grammars_dir(self) -> Path | None:
        """Where compiled grammars persist (None: the disk cache is off)."""
        if not self.grammar_cache:
            return None
        return self.grammar_cache_dir if self.grammar_cache_dir is not None else self.cache_dir / "grammars"

    @property
    def inductor_dir(self) -> Path:
        """Where torch.compile's kernels persist (``TORCHINDUCTOR_CACHE_DIR`` is set to it at the engine's start)."""
        return self.compile_cache_dir if self.compile_cache_dir is not None else self.cache_dir / "inductor"

    def replace(self, **changes: Any) -> "Settings":
        """A copy with the non-None ``changes`` (arguments) applied, validated; a bad one names its field."""
        given = {k: v for k, v in changes.items() if v is not None}
        return _build([("settings", self.model_dump()), ("argument", given)], None)


FIELDS = tuple(Settings.model_fields)
_ENV_AT_START: dict[str, str] = dict(os.environ)  # the one read of the environment, at import
_CURRENT: list[Settings] = []


def environment() -> Mapping[str, str]:
    """The environment as it was at start-up (for the server's own ``TYPEDLM_*`` settings)."""
    return _ENV_AT_START


def export_compile_settings(s: Settings) -> None:
    """Point torch.compile at ``s``'s kernel cache (the torch engine's start, before any compile; the worker count:
    :func:`typedlm.runner.compiled.set_compile_threads`):
    inductor reads its cache dir from the environment at each use (``TORCHINDUCTOR_CACHE_DIR``; Triton's cache
    sits under it unless ``TRITON_CACHE_DIR`` is set), so a restart reuses the compiled kernels."""
    os.environ[INDUCTOR_CACHE_ENV] = str(s.inductor_dir)


def quiet_forked_tokenizers() -> None:
    """Tell HF tokenizers not to warn in forked workers (``TOKENIZERS_PARALLELISM``, unless the user set it)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in FIELDS:
        value = env.get(ENV_PREFIX + name.upper())
        if value is not None and value.strip() != "":
            out[name] = value.strip().lower() if name in ("backend", "grammar_engine") else value.strip()
    return out


def read_toml(path: Path) -> dict[str, Any]:
    """TOML file ``path`` as a dict; unreadable or invalid: a ConfigError naming the file."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read config file '{path}': {e.strerror or e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file '{path}' is not valid TOML: {e}") from e


def from_file(path: Path) -> dict[str, Any]:
    """The ``[engine]`` table of TOML file ``path``; an unknown key there is an error."""
    table = read_toml(path).get(FILE_TABLE, {})
    if not isinstance(table, dict):
        raise ConfigError(f"config file '{path}': [{FILE_TABLE}] must be a table")
    out = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in FIELDS:
            raise ConfigError(f"config file '{path}': unknown key [{FILE_TABLE}] {key!r}; known: {', '.join(FIELDS)}")
        out[name] = value
    return out


def resolve(args: Mapping[str, Any] | None = None, *, config_file: Path | str | None = None,
            env: Mapping[str, str] | None = None) -> Settings:
    """Arguments (None values skipped) > ``env`` (default: the start-up environment) > config file > defaults."""
    env = _ENV_AT_START if env is None else env
    path = config_file or env.get(CONFIG_ENV) or None
    xdg = {"cache": Path(env["XDG_CACHE_HOME"]) / "typedlm"} if env.get("XDG_CACHE_HOME") else {}
    layers = [("XDG_CACHE_HOME", xdg), ("config file", from_file(Path(path)) if path else {}),
              ("environment", from_env(env)),
              ("argument", {k: v for k, v in (args or {}).items() if v is not None})]
    return _build(layers, path)


def merged(model: type[BaseModel], layers: list[tuple[str, dict]], describe: Mapping[str, Any]):
    """``model`` from ``layers`` (``(source, values)``, later ones win), validated; a bad value is a ConfigError
    naming it as ``describe[source](name, value)`` says (the environment: ``TYPEDLM_<NAME>=value``)."""
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    for where, layer in layers:
        values.update(layer)
        source.update({k: where for k in layer})
    try:
        return model(**values)
    except ValidationError as e:
        err = e.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "?"
        where, got = source.get(name, "default"), err.get("input")
        say = {"environment": lambda n, v: f"{ENV_PREFIX}{n.upper()}={v!r}", **describe}.get(where)
        raise ConfigError(f"{say(name, got) if say else f'{name} {got!r}'}: {err['msg']}") from None


def _build(layers: list[tuple[str, dict]], path) -> Settings:
    return merged(Settings, layers, {"argument": lambda n, v: f"{n}={v!r}", "settings": lambda n, v: f"{n}={v!r}",
                                     "config file": lambda n, v: f"[{FILE_TABLE}] {n} = {v!r} in config file '{path}'"})


def settings() -> Settings:
    """The process's settings: parsed from the start-up environment on first use, or those :func:`configure` set."""
    if not _CURRENT:
        _CURRENT.append(resolve())
    return _CURRENT[0]


def configure(new: Settings) -> Settings:
    """Make ``new`` the process's settings (a command does this once after parsing its flags); returns the old."""
    old = settings()
    _CURRENT[:] = [new]
    return old
