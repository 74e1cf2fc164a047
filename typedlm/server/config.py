"""``typedlm serve`` settings from four sources, merged field by field with the precedence
**command-line flag > environment variable > config file > default**.

- Flags: every ``typedlm serve`` option (a flag counts only when given on the command line).
- Environment: ``TYPEDLM_<FIELD>`` in upper case, e.g. ``TYPEDLM_MAX_BATCH=16``; lists
  (``served_model_names``) are comma-separated.
- Config file: ``typedlm serve --config FILE.toml``, top-level keys named like the fields
  (``max_batch = 16``) or like the flags (``max-batch = 16``); an unknown key is an error.

Every value is validated by :class:`ServeSettings` (pydantic); a bad one names its field and its source.
``GET /v1/config`` (:mod:`typedlm.server.admin.router`) answers them with secrets redacted.
"""

from __future__ import annotations

from pathlib import Path
import tomllib
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field

from ..config import ENV_PREFIX, FILE_TABLE, ConfigError, environment, merged, read_toml

SECRETS = ("api_key",)
REDACTED = "***"
LIST_FIELDS = ("served_model_names",)


class ServeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = "default"
    host: str = "127.0.0.1"
    port: int = Field(8000, gt=0, lt=65536)
    api_key: str | None = None
    max_batch: int = Field(8, ge=1)
    max_queue: int = Field(64, ge=0)
    max_tokens_cap: int = Field(4096, ge=1)
    max_prompt_tokens: int | None = Field(None, ge=1)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1)
    served_model_names: tuple[str, ...] = ()
    device: str = "auto"
    backend: Literal["auto", "torch", "mlx"] | None = None  # None: TYPEDLM_BACKEND, else auto
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    jump_forward: bool = False
    step_tokens: int | None = Field(None, ge=1)  # tokens per engine step (typedlm.config); None: its default
    threads: int | None = Field(None, ge=1)
    prefix_cache_gb: float | None = Field(None, ge=0)  # None: the device's default (runner/prefix_cache.py)
    deterministic: bool | None = None  # batch-invariant decisions + generation; None: decisions only
    grammar_engine: Literal["handoff", "xgrammar", "llguidance", "auto"] | None = None  # JSON constraints; requests may override

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def redacted(self) -> dict[str, Any]:
        d = self.model_dump(mode="json")
        for k in SECRETS:
            if d.get(k) is not None:
                d[k] = REDACTED
        return d


FIELDS = tuple(ServeSettings.model_fields)


def from_file(path: Path) -> dict[str, Any]:
    out = {}
    for key, value in read_toml(path).items():
        if key == FILE_TABLE:  # the engine's settings (typedlm.config)
            continue
        name = key.replace("-", "_")
        if name not in FIELDS:
            raise ConfigError(f"config file '{path}': unknown key {key!r}; known: {', '.join(FIELDS)}")
        out[name] = value
    return out


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in FIELDS:
        value = env.get(ENV_PREFIX + name.upper())
        if value is None:
            continue
        out[name] = [v.strip() for v in value.split(",") if v.strip()] if name in LIST_FIELDS else value
    return out


def resolve_settings(flags: Mapping[str, Any], *, config_file: Path | None = None,
                     env: Mapping[str, str] | None = None) -> ServeSettings:
    """Merge ``flags`` (only those given on the command line) > ``env`` > ``config_file`` > defaults."""
    layers = [("config file", from_file(config_file) if config_file else {}),
              ("environment", from_env(environment() if env is None else env)),
              ("flag", {k: v for k, v in flags.items() if k in FIELDS})]
    return merged(ServeSettings, layers, {"flag": lambda n, v: f"--{n.replace('_', '-')} {v}",
                                          "config file": lambda n, v: f"{n} = {v!r} in config file '{config_file}'"})
