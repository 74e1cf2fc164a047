"""``typedlm generate``: one generation under one constraint."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .util import (EXIT_INCOMPLETE, backend_option, deterministic_option, fail, grammar_engine_option, print_json,
                   read_json, read_text, user_errors)


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
    from ..engine import load_engine  # lazy: CLI start-up
    from ..generate import generate as run  # lazy: CLI start-up

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
        from ..generate.sampling import SamplingParams  # lazy: CLI start-up
        from ..grammar.spec import make_constraint  # lazy: CLI start-up

        constraint = make_constraint(**kwargs, lenient=lenient, engine=grammar_engine)
        if constraint is not None and constraint.kind == "json_schema" and not lenient:
            from ..grammar.schema import prepare_schema  # lazy: CLI start-up

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
