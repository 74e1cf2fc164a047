"""``typedlm serve``: the OpenAI-compatible server (FastAPI + uvicorn), loopback by default."""

from __future__ import annotations

import os
from typing import Optional

import typer

from ..cliutil import fail


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @app.command()
    def serve(
        model: str = typer.Option("default", "--model", "-m", help="default | HF dir | .gguf file | hub id"),
        host: str = typer.Option("127.0.0.1", "--host", help="bind address (loopback by default)"),
        port: int = typer.Option(8000, "--port"),
        api_key: Optional[str] = typer.Option(None, "--api-key", envvar="TYPEDLM_API_KEY",
                                              help="require 'Authorization: Bearer KEY' (all but /health)"),
        max_batch: int = typer.Option(8, "--max-batch", help="rows decoded together"),
        max_queue: int = typer.Option(64, "--max-queue", help="requests waiting for a row; more -> 429"),
        max_tokens_cap: int = typer.Option(4096, "--max-tokens-cap", help="max_tokens is lowered to this"),
        max_prompt_tokens: Optional[int] = typer.Option(None, "--max-prompt-tokens",
                                                        help="longer prompts -> 400 (default: the context)"),
        max_body_bytes: int = typer.Option(4 * 1024 * 1024, "--max-body-bytes", help="bigger bodies -> 413"),
        served_name: Optional[list[str]] = typer.Option(None, "--served-model-name",
                                                        help="extra model name clients may use (repeatable)"),
        device: str = typer.Option("auto", "--device"),
        dtype: Optional[str] = typer.Option(None, "--dtype", help="float32 | bfloat16 | float16"),
        log_level: str = typer.Option("info", "--log-level"),
        jump_forward: bool = typer.Option(False, "--jump-forward/--no-jump-forward",
                                          help="append grammar-forced text without sampling (requests may override)"),
    ):
        """Serve /v1/chat/completions, /v1/completions, /v1/models, /health, /ready, /metrics."""
        try:
            import uvicorn
        except ImportError:
            fail("the server needs typedlm's [server] extra (fastapi, uvicorn, prometheus_client)")
        from ..engine import load_engine
        from .app import create_app
        from .state import ServerConfig

        if not 0 < port < 65536:
            fail(f"--port {port} is not a TCP port")
        if max_batch < 1 or max_queue < 0 or max_tokens_cap < 1 or max_body_bytes < 1:
            fail("--max-batch, --max-tokens-cap and --max-body-bytes must be >= 1; --max-queue >= 0")
        names = tuple(served_name or ()) + ((model,) if model else ())
        config = ServerConfig(api_key=api_key or None, max_batch=max_batch, max_queue=max_queue,
                              max_tokens_cap=max_tokens_cap, max_prompt_tokens=max_prompt_tokens,
                              max_body_bytes=max_body_bytes, model_names=names,
                              jump_forward=jump_forward)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        app = create_app(lambda: load_engine(model, device=device, dtype=dtype, progress=True), config)
        uvicorn.run(app, host=host, port=port, log_level=log_level)
