"""``typedlm serve``: the OpenAI-compatible server (FastAPI + uvicorn), loopback by default.

Settings: flag > ``TYPEDLM_*`` environment variable > ``--config FILE.toml`` > default
(:mod:`typedlm.server.config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..server.config import ServeSettings
from .ray import SERVE_FLAGS, serve_on_ray
from .util import backend_option, deterministic_option, fail, grammar_engine_option

D = {name: f.default for name, f in ServeSettings.model_fields.items()}  # the defaults --help shows


def serve(
    ctx: typer.Context,
    config: Optional[Path] = typer.Option(None, "--config", help="TOML file of settings (keys = flag names)"),
    model: str = typer.Option(D["model"], "--model", "-m", help="default | HF dir | .gguf file | hub id"),
    host: str = typer.Option(D["host"], "--host", help="bind address (loopback by default)"),
    port: int = typer.Option(D["port"], "--port"),
    api_key: Optional[str] = typer.Option(None, "--api-key",
                                          help="require 'Authorization: Bearer KEY' (all but /health)"),
    max_batch: int = typer.Option(D["max_batch"], "--max-batch", help="rows decoded together"),
    max_queue: int = typer.Option(D["max_queue"], "--max-queue", help="requests waiting for a row; more -> 429"),
    max_tokens_cap: int = typer.Option(D["max_tokens_cap"], "--max-tokens-cap",
                                       help="max_tokens is lowered to this"),
    max_prompt_tokens: Optional[int] = typer.Option(None, "--max-prompt-tokens",
                                                    help="longer prompts -> 400 (default: the context)"),
    max_body_bytes: int = typer.Option(D["max_body_bytes"], "--max-body-bytes", help="bigger bodies -> 413"),
    served_model_names: Optional[list[str]] = typer.Option(None, "--served-model-name",
                                                           help="extra model name clients may use (repeatable)"),
    device: str = typer.Option(D["device"], "--device"),
    backend: Optional[str] = backend_option(),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32 | bfloat16 | float16"),
    log_level: str = typer.Option(D["log_level"], "--log-level",
                                  help="critical | error | warning | info | debug | trace"),
    jump_forward: bool = typer.Option(D["jump_forward"], "--jump-forward/--no-jump-forward",
                                      help="append grammar-forced text without sampling (requests may override)"),
    step_tokens: Optional[int] = typer.Option(None, "--step-tokens",
                                              help="tokens one engine step carries: decode rows first, then "
                                                   "decisions' prefill chunks and scoring passes (default 128)"),
    prefix_cache_gb: Optional[float] = typer.Option(None, "--prefix-cache-gb",
                                                    help="KV of prompt prefixes kept across requests, in GB "
                                                         "(0: off; default 10% of a GPU's memory, max 16, "
                                                         "1 on the CPU)"),
    deterministic: Optional[bool] = deterministic_option(),
    grammar_engine: Optional[str] = grammar_engine_option(),
    threads: Optional[int] = typer.Option(None, "--threads",
                                          help="torch intra-op threads (CPU)"),
    ray: bool = typer.Option(False, "--ray", help="replicas on Ray Serve (typedlm[ray]; README 'Scale out')"),
    address: Optional[str] = typer.Option(None, "--address", help="with --ray: auto | ray://HOST:PORT"),
    replicas: int = typer.Option(1, "--replicas", help="with --ray: replicas, one engine each"),
    gpus_per_replica: float = typer.Option(0, "--gpus-per-replica", help="with --ray: GPUs per replica"),
    max_replicas: Optional[int] = typer.Option(None, "--max-replicas", help="with --ray: autoscale up to this"),
):
    """Serve the playground (/), /v1/chat/completions, /v1/completions, /v1/decide, /v1/models, /v1/config,
    /health, /ready, /metrics. Every setting also comes from TYPEDLM_<NAME> or --config FILE.toml."""
    try:
        import uvicorn  # optional extra: typedlm[server]
    except ImportError:
        fail("the server needs typedlm's [server] extra (fastapi, uvicorn, prometheus_client)")
    given = {name: value for name, value in ctx.params.items()
             if name not in ("config", *SERVE_FLAGS)
             and getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"}
    s, server_config = settings_from(given, config)
    if ray:
        return serve_on_ray(s, server_config, address=address, replicas=replicas,
                            gpus_per_replica=gpus_per_replica, max_replicas=max_replicas)
    run_local(uvicorn, s, server_config, config)


def settings_from(given: dict, config: Optional[Path]):
    """(ServeSettings, ServerConfig) of the flags given on the command line over the environment and --config."""
    from ..server.config import ConfigError, resolve_settings  # lazy: CLI start-up
    from ..server.state import ServerConfig  # lazy: CLI start-up

    try:
        s = resolve_settings(given, config_file=config)
    except ConfigError as e:
        fail(str(e))
    names = tuple(s.served_model_names) + ((s.model,) if s.model else ())
    return s, ServerConfig(api_key=s.api_key or None, max_batch=s.max_batch, max_queue=s.max_queue,
                           max_tokens_cap=s.max_tokens_cap, max_prompt_tokens=s.max_prompt_tokens,
                           max_body_bytes=s.max_body_bytes, model_names=names, jump_forward=s.jump_forward,
                           settings=s)


def run_local(uvicorn, s, server_config, config_file: Optional[Path] = None) -> None:
    """One process: load the engine (in the app's start-up) and serve on --host/--port until Ctrl-C. The engine's
    settings: these flags, then the environment, then the file's ``[engine]`` table."""
    from ..config import ConfigError, configure as configure_process, quiet_forked_tokenizers  # lazy: CLI start-up
    from ..config import resolve as resolve_engine  # lazy: CLI start-up
    import torch  # lazy: CLI start-up

    from ..engine import load_engine  # lazy: CLI start-up
    from ..runner.prefix_cache import configure  # lazy: CLI start-up
    from ..server.app import create_app  # lazy: CLI start-up
    from ..server.logs import uvicorn_log_config  # lazy: CLI start-up

    if s.threads:
        torch.set_num_threads(s.threads)
    quiet_forked_tokenizers()
    try:
        engine_settings = resolve_engine({"backend": s.backend, "grammar_engine": s.grammar_engine,
                                          "prefix_cache_gb": s.prefix_cache_gb, "step_tokens": s.step_tokens},
                                         config_file=config_file)
        configure_process(engine_settings)  # (returns the settings it replaces)
    except ConfigError as e:
        fail(str(e))
    app = create_app(lambda: configure(load_engine(s.model, device=s.device, dtype=s.dtype, progress=True,
                                                   deterministic=s.deterministic, settings=engine_settings),
                                       s.prefix_cache_gb), server_config)
    uvicorn.run(app, host=s.host, port=s.port, log_level=s.log_level, log_config=uvicorn_log_config(s.log_level))
