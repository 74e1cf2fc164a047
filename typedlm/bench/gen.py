"""``typedlm bench gen``: generation throughput of the continuous-batching scheduler, free vs JSON
Schema, batch 1 and N, next to Hugging Face ``generate`` on the same model in the same run.

Subject: a random-weight model of a real architecture with its real vocabulary
(``typedlm.testing.archs.random_engine``; speed does not depend on weight values), or ``--arch tiny``
(the 2-layer test model) for a CPU smoke run. Greedy decoding everywhere so both paths do the same
work; every row of a batch gets the same prompt. ``HF generate + xgrammar`` uses xgrammar's own
``contrib.hf.LogitsProcessor`` (one matcher per row). Tokens/s counts the tokens actually emitted.
"""

from __future__ import annotations

import importlib.metadata as md
import platform
import time

from rich.console import Console
from rich.table import Table
import torch
import xgrammar as xgr
import xgrammar.contrib.hf as xhf

from ..engine import engine_from_model, pick_device, pick_dtype
from ..generate import SamplingParams, build_sequence
from ..generate.scheduler import run_batch
from ..grammar import make_constraint
from ..grammar.spec import canonical_json
from ..testing import default_tokenizer, tiny_llama
from ..testing.archs import ARCHS, random_engine


PROMPT = ("You are a careful assistant. Read the order below and answer with a JSON record of every item, "
          "its quantity and price.\nOrder: two notebooks at 3.50 each, one pen at 1.20, a stapler at 7.99 "
          "and four folders at 0.80 each.")
# long enough to keep a random model busy (>= 16 items), every part bounded so it also ends
SCHEMA = {"type": "object",
          "properties": {"items": {"type": "array", "minItems": 16, "maxItems": 64,
                                   "items": {"type": "object",
                                             "properties": {"name": {"type": "string", "minLength": 8,
                                                                     "maxLength": 24},
                                                            "qty": {"type": "integer", "minimum": 0, "maximum": 99}},
                                             "required": ["name", "qty"], "additionalProperties": False}}},
          "required": ["items"], "additionalProperties": False}


def load_subject(arch: str, device: str, dtype: str | None):
    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    if arch == "tiny":
        tok = default_tokenizer()
        return engine_from_model(tiny_llama(tok), tok, name="tiny-random-llama", device=dev, dtype=dt)

    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}: choose tiny or one of {sorted(ARCHS)}")
    return random_engine(arch, device=str(dev), dtype=dt)


def run_typedlm(engine, ids: list[int], batch: int, max_tokens: int, constraint) -> dict:
    params = SamplingParams(max_tokens=max_tokens, temperature=0)
    seqs = [build_sequence(engine, ids, params, constraint) for _ in range(batch)]
    engine.sync()
    t0 = time.perf_counter()
    results = run_batch(engine, seqs, max_batch=batch)
    engine.sync()
    wall = time.perf_counter() - t0
    tokens = sum(r.completion_tokens for r in results)
    out = {"wall_s": round(wall, 4), "tokens": tokens, "tok_s": round(tokens / wall, 2),
           "row_tok_s": round(tokens / batch / wall, 2),
           "prefill_ms": round(1e3 * sum(r.timings["prefill"] for r in results) / batch, 2),
           "finish": sorted({r.finish_reason for r in results})}
    if constraint is not None and constraint.schema is not None:
        out["schema_valid"] = sum(bool(r.schema_valid) for r in results if r.finish_reason == "stop")
    return out


def run_hf_static(engine, ids: list[int], batch: int, max_tokens: int, constraint) -> dict:
    """HF ``generate`` with its static cache (transformers compiles the forward itself); the first
    run of a shape compiles and is reported as ``warmup_s``, the second is timed."""
    t0 = time.perf_counter()
    first = run_hf(engine, ids, batch, max_tokens, constraint, cache_implementation="static")
    if "error" in first:
        return first
    out = run_hf(engine, ids, batch, max_tokens, constraint, cache_implementation="static")
    out["warmup_s"] = round(time.perf_counter() - t0 - out.get("wall_s", 0.0), 2)
    return out


def run_hf(engine, ids: list[int], batch: int, max_tokens: int, constraint, **extra) -> dict:
    if engine.backend != "torch":
        return {"error": f"HF generate baselines need the torch backend (this engine runs on {engine.backend})"}
    model = engine.model
    input_ids = torch.tensor([ids] * batch, device=engine.device)
    kwargs = dict(max_new_tokens=max_tokens, do_sample=False, pad_token_id=engine.tokenizer.pad_token_id
                  if engine.tokenizer.pad_token_id is not None else sorted(engine.stop_ids)[0],
                  attention_mask=torch.ones_like(input_ids), **extra)
    if constraint is not None:  # the baseline: xgrammar's own HF processor on the raw schema (no typedlm rewrites)
        compiled = xgr.GrammarCompiler(engine.grammars.tokenizer_info).compile_json_schema(
            canonical_json(constraint.value), any_whitespace=constraint.any_whitespace)
        kwargs["logits_processor"] = [xhf.LogitsProcessor(compiled)]
    try:
        engine.sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids, **kwargs)
        engine.sync()
        wall = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - a failed comparison is written down, the bench goes on
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    new = out[:, len(ids):]
    stops = torch.tensor(sorted(engine.stop_ids), device=new.device)
    tokens = 0
    for row in new:
        hit = torch.isin(row, stops).nonzero()
        tokens += int(hit[0]) if hit.numel() else int(row.shape[0])
    return {"wall_s": round(wall, 4), "tokens": tokens, "tok_s": round(tokens / wall, 2),
            "row_tok_s": round(tokens / batch / wall, 2)}


def _measured(fn, engine, *args) -> dict:
    """One run with the peak device memory it reached (GiB; CUDA only)."""
    cuda = engine.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(engine.device)
    out = fn(engine, *args)
    if cuda:
        out["peak_gib"] = round(torch.cuda.max_memory_allocated(engine.device) / 2**30, 2)
    return out


def unique_schema() -> dict:
    """:data:`SCHEMA` with ``uniqueItems`` on its array (the decode-time guard's cost: ``--unique-items``)."""
    items = {**SCHEMA["properties"]["items"], "uniqueItems": True}
    return {**SCHEMA, "properties": {**SCHEMA["properties"], "items": items}}


def bench_gen(engine, *, batches=(1, 8, 32), max_tokens: int = 256, hf: bool = True, hf_static: bool = True,
              progress=None, schema: dict = SCHEMA) -> dict:
    ids = engine.encode_prompt(messages=[{"role": "user", "content": PROMPT}]) if engine.chat.has_template \
        else engine.encode_prompt(prompt=PROMPT)
    modes = {"free": None, "json_schema": make_constraint(json_schema=schema, any_whitespace=False)}
    compile_s = engine.grammars.compile(modes["json_schema"])[1]
    # warm-up: static KV for the largest batch + every CUDA graph bucket this run can meet, then
    # kernels, allocator, grammar path (not timed; the capture time is reported)
    t0 = time.perf_counter()
    kv = engine.runner.decode_cache(max(batches))
    engine.runner.capture(kv, len(ids) + max_tokens)
    warmup_s = time.perf_counter() - t0
    run_typedlm(engine, ids, 1, 4, None)
    run_typedlm(engine, ids, 1, 4, modes["json_schema"])
    if max(batches) > 1:  # the first run of many rows pays one-time set-up, once per process (H200, 32 rows:
        # the first free prefill and the first JSON run pay it)
        run_typedlm(engine, ids, max(batches), 2, None)
        run_typedlm(engine, ids, max(batches), 2, modes["json_schema"])
    if hf:
        run_hf(engine, ids, 1, 4, None)
    rows = []
    for b in batches:
        for mode, c in modes.items():
            engines = [("typedlm", run_typedlm)] + ([("hf_generate", run_hf)] if hf else []) \
                + ([("hf_static_compiled", run_hf_static)] if hf_static else [])
            for name, fn in engines:
                if progress:
                    progress(f"{name} batch={b} {mode}")
                rows.append({"engine": name, "batch": b, "mode": mode, **_measured(fn, engine, ids, b, max_tokens, c)})
    ratios = {}
    for r in rows:
        if r["mode"] == "json_schema" and "tok_s" in r:
            free = [f for f in rows if f["mode"] == "free" and f["engine"] == r["engine"] and f["batch"] == r["batch"]]
            if free and free[0].get("tok_s"):
                ratios[f"{r['engine']} b{r['batch']}"] = round(r["tok_s"] / free[0]["tok_s"], 3)
    return {
        "bench": "gen",
        "model": engine.name,
        "device": str(engine.device),
        "device_name": torch.cuda.get_device_name(engine.device) if engine.device.type == "cuda"
        else (platform.processor() or platform.machine()),
        "dtype": str(engine.dtype).replace("torch.", ""),
        "vocab": engine.model_vocab_size,
        "prompt_tokens": len(ids),
        "max_tokens": max_tokens,
        "schema_compile_s": round(compile_s, 4),
        "unique_items": schema is not SCHEMA,
        "kv": type(kv).__name__,
        "warmup_capture_s": round(warmup_s, 2),
        "cuda_graphs": engine.runner.graph_stats(kv)[0],
        "json_over_free": ratios,
        "versions": {p: _version(p) for p in ("torch", "transformers", "xgrammar")},
        "results": rows,
    }


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def print_table(res: dict) -> None:
    t = Table(title=f"bench gen: {res['model']} on {res['device_name']} ({res['dtype']}), "
                    f"{res['prompt_tokens']}-token prompt, max {res['max_tokens']} new tokens")
    for col in ("engine", "batch", "mode", "tokens", "wall s", "tok/s", "tok/s/row", "peak GiB", "finish / error"):
        t.add_column(col, justify="right" if col not in ("engine", "mode", "finish / error") else "left")
    for r in res["results"]:
        if "error" in r:
            t.add_row(r["engine"], str(r["batch"]), r["mode"], "", "", "", "", "", r["error"][:60])
            continue
        t.add_row(r["engine"], str(r["batch"]), r["mode"], str(r["tokens"]), f"{r['wall_s']:.2f}",
                  f"{r['tok_s']:.1f}", f"{r['row_tok_s']:.1f}", str(r.get("peak_gib", "")),
                  ",".join(r.get("finish", [])) + (f" warm-up {r['warmup_s']} s" if "warmup_s" in r else ""))
    con = Console(stderr=True, width=140)
    con.print(t)
    con.print(f"typedlm KV: {res['kv']}, warm-up + CUDA graph capture {res['warmup_capture_s']} s "
              f"({res['cuda_graphs']} graphs); JSON/free: {res['json_over_free']}")
