"""``typedlm bench mlx``: the MLX backend side by side with mlx-lm's own generation and the torch backend,
in one run on one model (issue 19's targets).

Rows (greedy, one prompt repeated ``batch`` times, ``max_tokens`` each; tok/s = generated tokens / wall of
the whole call, prefill included, for every row alike; ``--repeat`` runs them in turn, ratios are medians of
the per-run pairs):
  * ``mlx-lm``        mlx-lm's ``stream_generate`` (batch 1) / ``batch_generate`` (batch > 1), free text
  * ``typedlm-mlx``   typedlm's scheduler on the MLX runner, free text and JSON Schema
  * ``typedlm-torch`` the same on the torch backend, free text
Decisions: ``decide`` wall on MLX vs the MLX prefill of the same prompt inside it (``timings.prefill``).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time

from ..decide import decide
from ..engine import load_engine
from ..generate import SamplingParams, build_sequence
from ..generate.scheduler import run_batch
from ..grammar import make_constraint


PROMPT = "Write a long story about a robot who learns to paint."
SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string"}, "characters": {"type": "array", "items": {"type": "string"}},
    "chapters": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "summary": {"type": "string"}}, "required": ["name", "summary"]}}},
    "required": ["title", "characters", "chapters"]}
DECIDE_SCHEMA = {"description": "Triage a support ticket.", "fields": {
    "priority": {"type": "enum", "description": "How urgent?", "choices": ["low", "medium", "high", "critical"]},
    "spam": {"type": "boolean", "description": "Is it spam?"},
    "tags": {"type": "multi", "description": "Which apply?", "choices": ["refund", "bug", "feature request"]}}}
DECIDE_CTX = "My card was charged twice this month and I want my money back. Please fix this today."


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run_typedlm(engine, ids: list[int], batch: int, max_tokens: int, schema=None) -> dict:
    c = make_constraint(json_schema=schema, any_whitespace=False) if schema else None
    params = SamplingParams(max_tokens=max_tokens, temperature=0)
    seqs = [build_sequence(engine, ids, params, c) for _ in range(batch)]
    wall, res = _timed(lambda: run_batch(engine, seqs, max_batch=batch))
    tokens = sum(len(r.token_ids) for r in res)
    return {"wall_s": round(wall, 3), "tokens": tokens, "tok_s": round(tokens / wall, 2)}


def run_mlx_lm(model, tokenizer, ids: list[int], batch: int, max_tokens: int) -> dict:
    from mlx_lm import batch_generate, stream_generate  # optional extra: mlx

    if batch == 1:
        wall, out = _timed(lambda: list(stream_generate(model, tokenizer, ids, max_tokens=max_tokens)))
        tokens = out[-1].generation_tokens
    else:
        wall, out = _timed(lambda: batch_generate(model, tokenizer, [ids] * batch, max_tokens=max_tokens,
                                                  return_token_ids=True))
        tokens = sum(len(t) for t in out.token_ids)
    return {"wall_s": round(wall, 3), "tokens": tokens, "tok_s": round(tokens / wall, 2)}


def bench_mlx(model: str, batches: tuple[int, ...], max_tokens: int, torch_too: bool, progress,
              repeat: int = 1) -> dict:
    from mlx_lm import load as mlx_load  # optional extra: mlx

    eng = load_engine(model, backend="mlx", progress=False)
    ref_model, ref_tok = mlx_load(eng.source)
    ids = eng.encode_prompt(messages=[{"role": "user", "content": PROMPT}])
    rows = []
    run_typedlm(eng, ids, 1, 4)  # warm-up
    run_mlx_lm(ref_model, ref_tok, ids, 1, 4)
    for b in batches:
        for rep in range(repeat):  # A B A B: each ratio is taken pair by pair (the machine's speed drifts)
            progress(f"batch {b} run {rep + 1}/{repeat}")
            for impl, kind, fn in (("mlx-lm", "free", lambda: run_mlx_lm(ref_model, ref_tok, ids, b, max_tokens)),
                                   ("typedlm-mlx", "free", lambda: run_typedlm(eng, ids, b, max_tokens)),
                                   ("typedlm-mlx", "json", lambda: run_typedlm(eng, ids, b, max_tokens, SCHEMA))):
                rows.append({"impl": impl, "kind": kind, "batch": b, "run": rep, **fn()})
    if torch_too:
        te = load_engine(model, backend="torch", progress=False)
        run_typedlm(te, ids, 1, 4)
        for b in batches:
            progress(f"torch batch {b}")
            rows.append({"impl": "typedlm-torch", "kind": "free", "batch": b, **run_typedlm(te, ids, b, max_tokens)})
    decide(DECIDE_SCHEMA, DECIDE_CTX, engine=eng)  # warm-up (plan compile)
    wall, d = _timed(lambda: decide(DECIDE_SCHEMA, DECIDE_CTX, engine=eng))
    by = {(r["impl"], r["kind"], r["batch"], r.get("run", 0)): r["tok_s"] for r in rows}
    ratios = {}
    for b in batches:
        pairs = [(by[("typedlm-mlx", "free", b, i)], by[("mlx-lm", "free", b, i)], by[("typedlm-mlx", "json", b, i)])
                 for i in range(repeat)]
        ratios[f"mlx_over_mlx_lm_b{b}"] = round(statistics.median(f / ref for f, ref, _ in pairs), 3)
        ratios[f"json_over_free_b{b}"] = round(statistics.median(j / f for f, _, j in pairs), 3)
    ratios["decide_over_prefill"] = round(wall / d.timings["prefill"], 3)
    import mlx.core as mx  # optional extra: mlx
    import mlx_lm  # optional extra: mlx

    return {"bench": "mlx", "model": eng.name, "dtype": str(eng.dtype).replace("torch.", ""),
            "machine": f"{os.cpu_count()}-core {platform.machine()} CPU ({platform.system()}), mlx[cpu] {mx.__version__}, "
                       f"mlx-lm {mlx_lm.__version__}",
            "prompt_tokens": len(ids), "max_tokens": max_tokens, "rows": rows,
            "decide": {"wall_s": round(wall, 4), "prefill_s": round(d.timings["prefill"], 4),
                       "prompt_tokens": d.usage.get("prompt_tokens")},
            "ratios": ratios, "targets": {"mlx_over_mlx_lm_b1": ">= 0.95", "mlx_over_mlx_lm_b8": ">= 1.0",
                                          "json_over_free": ">= 0.9", "decide_over_prefill": "<= 1.5"}}
