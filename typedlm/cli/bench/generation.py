"""``typedlm bench`` commands of generation: grammar mask fill, throughput, jump-forward, MLX, ITL, prefix cache."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from ..util import backend_option, fail, print_json, user_errors, write_json


def grammar_cmd(tokenizer: str = typer.Option("both", help="default | qwen2.5 | both"),
                repeats: int = typer.Option(5, min=1),
                grammar_engine: str = typer.Option("xgrammar", "--grammar-engine",
                                                   help="handoff | xgrammar | llguidance | auto (JSON Schemas)"),
                json_out: Optional[Path] = typer.Option(None, "--json", help="also write results here")):
    """Mask-fill time per token (p50/p99/max) and compile time cold vs cached."""
    from ...bench.grammar import print_table, run  # lazy: CLI start-up


    if tokenizer not in ("default", "qwen2.5", "both"):
        fail(f"--tokenizer must be default, qwen2.5 or both, not {tokenizer!r}")
    if grammar_engine not in ("handoff", "xgrammar", "llguidance", "auto"):
        fail(f"--grammar-engine must be handoff, xgrammar, llguidance or auto, not {grammar_engine!r}")
    res = run(tokenizer, repeats, grammar_engine)
    print_json(res)
    print_table(res)
    if json_out:
        Path(json_out).write_text(json.dumps(res, indent=2))


def gen(
    arch: str = typer.Option("qwen2.5-7b", "--arch", help="qwen2.5-7b | qwen2.5-0.5b | tiny"),
    device: str = typer.Option("auto", "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="default: bf16 on cuda, fp32 on cpu"),
    batch: Optional[list[int]] = typer.Option(None, "--batch", help="batch sizes (repeatable; default 1, 8, 32)"),
    max_tokens: int = typer.Option(256, "--max-tokens"),
    hf: bool = typer.Option(True, "--hf/--no-hf", help="also time HF generate on the same model"),
    hf_static: bool = typer.Option(True, "--hf-static/--no-hf-static",
                                   help="also time HF generate with its static cache (compiled; CUDA only)"),
    out: Optional[Path] = typer.Option(None, "--json", help="write the results JSON here"),
    deterministic: bool = typer.Option(False, "--deterministic",
                                       help="typedlm rows on the batch-invariant kernels (decode uncompiled)"),
    unique_items: bool = typer.Option(False, "--unique-items",
                                      help="the JSON schema's array with uniqueItems (the decode-time guard)"),
):
    """Throughput: typedlm continuous batching vs HF generate, free vs JSON Schema."""
    from ...bench.gen import SCHEMA, bench_gen, load_subject, print_table, unique_schema  # lazy: CLI start-up

    batches = tuple(batch or (1, 8, 32))
    if any(b < 1 for b in batches) or max_tokens < 1:
        fail("--batch and --max-tokens must be >= 1")
    with user_errors():
        t0 = time.perf_counter()
        engine = load_subject(arch, device, dtype)
        if deterministic:
            from ...engine import set_deterministic  # lazy: CLI start-up

            set_deterministic(engine, True)
        init_s = time.perf_counter() - t0
        res = bench_gen(engine, batches=batches, max_tokens=max_tokens, hf=hf,
                        hf_static=hf_static and engine.device.type == "cuda",
                        progress=lambda m: typer.echo(f"... {m}", err=True),
                        schema=unique_schema() if unique_items else SCHEMA)
    res["model_init_s"] = round(init_s, 2)
    res["command"] = "typedlm bench gen " + " ".join(
        [f"--arch {arch}", f"--device {device}"] + ([f"--dtype {dtype}"] if dtype else [])
        + [f"--batch {b}" for b in batches] + [f"--max-tokens {max_tokens}"] + ([] if hf else ["--no-hf"])
        + ([] if hf_static else ["--no-hf-static"]) + (["--deterministic"] if deterministic else [])
        + (["--unique-items"] if unique_items else []))
    res["deterministic"] = deterministic
    print_json(res)
    print_table(res)
    if out:
        write_json(out, res)


def jump_forward(
    arch: str = typer.Option("tiny", "--arch", help="tiny | qwen2.5-0.5b | qwen2.5-7b | default (SmolLM2)"),
    device: str = typer.Option("auto", "--device"),
    backend: Optional[str] = backend_option(),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="default: bf16 on cuda, fp32 on cpu"),
    batch: Optional[list[int]] = typer.Option(None, "--batch", help="batch sizes (repeatable; default 1)"),
    max_tokens: int = typer.Option(400, "--max-tokens"),
    repeats: int = typer.Option(3, "--repeats", help="runs per configuration; the fastest is reported"),
    out: Optional[Path] = typer.Option(None, "--json", help="write the results JSON here"),
):
    """Jump-forward on vs off on JSON-heavy schemas: steps, tokens/s, speed-up, same text."""
    from ...bench.jump_forward import bench, print_table  # lazy: CLI start-up
    from ...bench.gen import load_subject  # lazy: CLI start-up

    batches = tuple(batch or (1,))
    if any(b < 1 for b in batches) or max_tokens < 1 or repeats < 1:
        fail("--batch, --max-tokens and --repeats must be >= 1")
    with user_errors():
        if arch == "default":
            from ...engine import load_engine  # lazy: CLI start-up

            engine = load_engine("default", device=device, dtype=dtype, backend=backend, progress=False)
        else:
            engine = load_subject(arch, device, dtype)
        res = bench(engine, batches=batches, max_tokens=max_tokens, repeats=repeats,
                    progress=lambda m: typer.echo(f"... {m}", err=True))
    res["command"] = "typedlm bench jump-forward " + " ".join(
        [f"--arch {arch}", f"--device {device}"] + ([f"--dtype {dtype}"] if dtype else [])
        + [f"--batch {b}" for b in batches] + [f"--max-tokens {max_tokens}", f"--repeats {repeats}"])
    print_json(res)
    print_table(res)
    if out:
        write_json(out, res)


def mlx(
    model: str = typer.Option("default", "--model", "-m"),
    batch: Optional[list[int]] = typer.Option(None, "--batch", help="batch sizes (repeatable; default 1, 8)"),
    max_tokens: int = typer.Option(64, "--max-tokens"),
    torch_too: bool = typer.Option(True, "--torch/--no-torch", help="also the torch backend on the same model"),
    repeat: int = typer.Option(1, "--repeat", help="runs per batch size, mlx-lm and typedlm in turn (ratios: median of pairs)"),
    out: Optional[Path] = typer.Option(None, "--json", help="write the results JSON here"),
):
    """The MLX backend vs mlx-lm's own generate / batch_generate vs the torch backend (one run)."""
    from ...bench.mlx import bench_mlx  # lazy: CLI start-up

    batches = tuple(batch or (1, 8))
    if any(b < 1 for b in batches) or max_tokens < 1 or repeat < 1:
        fail("--batch, --max-tokens and --repeat must be >= 1")
    with user_errors():
        res = bench_mlx(model, batches, max_tokens, torch_too, lambda m: typer.echo(f"... {m}", err=True), repeat)
    res["command"] = "typedlm bench mlx " + " ".join(
        [f"--model {model}"] + [f"--batch {b}" for b in batches] + [f"--max-tokens {max_tokens}", f"--repeat {repeat}"]
        + ([] if torch_too else ["--no-torch"]))
    text = json.dumps(res, indent=2)
    if out:
        out.write_text(text + "\n")
    typer.echo(text)


def itl(
    model: str = typer.Option("tiny", "--model", "-m", help="tiny (random-weight test model) | default | HF dir"),
    arch: Optional[str] = typer.Option(None, "--arch", help="random-weight real architecture, e.g. qwen2.5-0.5b"),
    device: str = typer.Option("cpu", "--device"),
    backend: Optional[str] = backend_option(),
    streams: int = typer.Option(4, "--streams"),
    rounds: int = typer.Option(1, "--rounds", help="requests per stream client, one after another"),
    max_tokens: int = typer.Option(64, "--max-tokens"),
    decide_clients: int = typer.Option(1, "--decide-clients"),
    decisions: int = typer.Option(20, "--decisions", help="decisions the decide-alone run measures"),
    preset: str = typer.Option("support_triage", "--preset"),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch intra-op threads"),
    mode: Optional[list[str]] = typer.Option(None, "--mode", help="alone | decide-alone | beside[@TOKENS[/FORWARDS]] "
                                             "(repeatable; beside@64/2: 64 tokens, 2 work forwards a step)"),
    out: Optional[Path] = typer.Option(None, "--json", help="write the results JSON here"),
):
    """p50/p99 inter-token latency of streaming requests and decide latency, alone and together."""
    from ...bench.itl import MODES, _check_modes, bench_itl, print_table, to_markdown  # lazy: CLI start-up
    import shlex  # lazy: CLI start-up
    import sys  # lazy: CLI start-up


    modes = tuple(mode or MODES)
    if (bad := _check_modes(modes)) is not None:
        fail(bad)
    if min(streams, rounds, decisions) < 1 or max_tokens < 2 or decide_clients < 0:
        fail("--streams, --rounds, --decisions >= 1; --max-tokens >= 2; --decide-clients >= 0")
    import torch  # lazy: CLI start-up

    if threads:
        torch.set_num_threads(threads)
    with user_errors():
        if model == "tiny" and not arch:
            from ...testing import tiny_engine  # lazy: CLI start-up

            engine = tiny_engine()
        else:
            from ...testing.archs import bench_engine  # lazy: CLI start-up

            engine = bench_engine(arch, model, device=device, backend=backend)
        res = bench_itl(engine, modes=modes, streams=streams, rounds=rounds, max_tokens=max_tokens,
                        decide_clients=decide_clients, decisions=decisions, preset=preset,
                        progress=lambda m: typer.echo(f"... {m}", err=True))
    res["command"] = "typedlm bench itl " + shlex.join(sys.argv[sys.argv.index("itl") + 1:]
                                                       if "itl" in sys.argv else [])
    print_json(res)
    print_table(res)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
        Path(out).with_suffix(".md").write_text(to_markdown(res), encoding="utf-8")


def bench_prefix_cache(
    model: str = typer.Option("default", "--model", "-m", help="model reference (ignored with --arch)"),
    arch: Optional[str] = typer.Option(None, "--arch", help="random-weight real architecture, e.g. qwen2.5-7b"),
    device: str = typer.Option("auto", "--device"),
    backend: Optional[str] = backend_option(),
    preset: str = typer.Option("support_triage", "--preset"),
    runs: int = typer.Option(3, "--runs", help="repetitions (each: off, then on)"),
    many: int = typer.Option(16, "--many", help="contexts per decide_many call"),
    system_tokens: int = typer.Option(1000, "--system-tokens", help="shared chat system prompt, tokens"),
    prefix_cache_gb: Optional[float] = typer.Option(None, "--prefix-cache-gb", help="cache size when on"),
    out: Optional[Path] = typer.Option(None, "--out", help="write JSON here (and .md beside it)"),
    machine: Optional[str] = typer.Option(None, "--machine", help="machine description for the report"),
    invariant: str = typer.Option("default", "--invariant",
                                  help="batch-invariant scoring: default, on, off, or on,off (once per mode)"),
):
    """The prefix cache on vs off: decide first vs later calls, chat TTFT with a shared system prompt,
    decide_many throughput warm."""
    from ...bench.prefix_cache import run_bench, to_markdown  # lazy: CLI start-up
    import shlex  # lazy: CLI start-up
    import sys  # lazy: CLI start-up

    from ...testing.archs import bench_engine  # lazy: CLI start-up
    from ...runner.prefix_cache import configure  # lazy: CLI start-up
    from ...bench.decide import _machine  # lazy: CLI start-up

    with user_errors():
        engine = bench_engine(arch, model, device=device, backend=backend)
        configure(engine, prefix_cache_gb)
        if not engine.runner.prefix_cache.enabled:
            raise ValueError("--prefix-cache-gb 0: nothing to compare")
        modes = [m.strip() for m in invariant.split(",")]
        if any(m not in ("default", "on", "off") for m in modes):
            raise ValueError(f"--invariant takes default, on, off or a comma list of them, got {invariant!r}")
        results = []
        for mode in modes:
            if mode != "default":
                engine.runner.set_invariant(mode == "on")
            results.append(run_bench(engine, preset=preset, runs=runs, many=many, system_tokens=system_tokens,
                                     progress=lambda m: typer.echo(m, err=True)))
    args = sys.argv[sys.argv.index("prefix-cache") + 1:] if "prefix-cache" in sys.argv else []
    for r in results:
        r["machine"] = machine or _machine(engine)
        r["command"] = ("typedlm bench prefix-cache " + shlex.join(args)).strip()
    r = results[0] if len(results) == 1 else {"modes": results}
    print_json(r)
    md = "\n".join(to_markdown(x) for x in results)
    typer.echo(md, err=True)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(r, indent=2, ensure_ascii=False) + "\n")
        out.with_suffix(".md").write_text(md)
