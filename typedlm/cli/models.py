"""``typedlm models``: list the converted models in the cache, or convert one."""

from __future__ import annotations

import typer

from .util import fail, print_json, user_errors

app = typer.Typer(help="List cached (converted) models, or convert one.")


@app.callback(invoke_without_command=True)
def models_list(ctx: typer.Context, as_json: bool = typer.Option(False, "--json")):
    """List converted models in the cache."""
    if ctx.invoked_subcommand:
        return
    from .. import models  # lazy: CLI start-up

    rows = models.list_cached()
    if as_json:
        print_json(rows)
        return
    if not rows:
        typer.echo(f"no converted models in {models.models_dir()} (run: typedlm models convert default)")
        return
    for r in rows:
        typer.echo(f"{r['name']}\t{r['bytes'] / 1e6:.0f} MB\t{r['dir']}\t(from {r['source']})")


@app.command("convert")
def models_convert(ref: str = typer.Argument("default", help="default or a .gguf file")):
    """Convert a GGUF model (or the default) once into the cache."""
    from .. import models  # lazy: CLI start-up

    with user_errors():
        resolved = models.resolve(ref)
        if resolved.kind not in ("default", "gguf"):
            fail(f"'{ref}' is not a GGUF model: nothing to convert")
        out = models.convert_gguf(resolved)
    typer.echo(str(out))
