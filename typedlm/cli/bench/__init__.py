"""``typedlm bench ...``: the benchmark commands (JSON on stdout, a table on stderr), in ``--help`` order."""

from __future__ import annotations

import typer

from . import decide, generation, roofline, schema, soak

app = typer.Typer(no_args_is_help=True, help="Benchmarks: print JSON and a table.")
app.command("grammar")(generation.grammar_cmd)
app.command("gen")(generation.gen)
app.command("jump-forward")(generation.jump_forward)
app.command("mlx")(generation.mlx)
app.command("decide")(decide.bench_decide)
app.command("itl")(generation.itl)
app.command("jsonschema-suite")(schema.jsonschema_suite)
app.command("schema-compile")(schema.schema_compile)
app.command("trust")(decide.trust)
app.command("scale")(decide.scale_cmd)
app.command("prefix-cache")(generation.bench_prefix_cache)
app.command("soak")(soak.soak)
app.command("roofline")(roofline.roofline)
