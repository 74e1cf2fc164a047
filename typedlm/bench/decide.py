"""``typedlm bench decide``: p50 latency of ``decide`` vs naive JSON generation vs a bare prefill, and
``decide_many`` throughput (field decisions/s) at several batch sizes of ~400-token contexts with the
shared-prefix hit (prompt tokens read from the prefix KV instead of being computed again).

CPU (default model):   typedlm bench decide --many 1,4,16
GPU (random 7B-class): typedlm bench decide --arch qwen2.5-7b --device cuda --many 1,16,64
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time

import torch

from ..decide import presets, ties
from ..decide.api import decide, decide_many, plan_for
from ..decide.naive import naive_generate
from ..decide.passes import prefill
from ..decide.prompt import prompt_ids
from ..decide.result import TOLERANCE
from ..testing.contexts import contexts


def _p50(xs: list[float]) -> float:
    return statistics.median(xs)


def _machine(engine) -> str:
    if engine.device.type == "cuda":
        return f"{torch.cuda.get_device_name(engine.device)} GPU"

    return f"{os.cpu_count()}-core {platform.machine()} CPU, no GPU"


def _gap(f) -> float:
    """A field's smallest top-2 gap in nats (scalar: its log-scores; multi: each option's yes vs no)."""
    if f.type == "multi":
        return min((abs(math.log(max(p, 1e-300)) - math.log(max(1 - p, 1e-300))) for p in f.probabilities.values()),
                   default=math.inf)
    top = sorted(f.log_scores.values(), reverse=True)
    return top[0] - top[1] if len(top) > 1 else float("inf")


def run_many(engine, *, preset: str, sizes, runs: int, tokens: int = 400, parity_contexts: int = 4,
             progress=print) -> dict:
    """decide_many throughput per batch size: p50 wall time, field decisions/s, the shared-prefix hit;
    and its parity (max |Δ log-score| vs one row per forward) on the first contexts of the largest batch."""
    schema = presets.load(preset)["schema"]
    fields = len(schema.fields)
    drift = ties.drift(engine)
    out: dict = {"context_tokens": tokens, "drift_nats": drift, "sizes": {}}
    saved = dict(ties.DRIFT_NATS)
    for n in sizes:
        ctxs = contexts(engine, n, tokens)
        times, ds = [], None
        try:  # the batched scoring alone; the fields near-tie safety would rescore are counted below
            ties.DRIFT_NATS.update({k: -1.0 for k in saved})
            decide_many(schema, ctxs, engine=engine)  # warm-up (and the neutral prior, cached per plan)
            for _ in range(runs):
                t0 = time.perf_counter()
                ds = decide_many(schema, ctxs, engine=engine)
                engine.sync()
                times.append(time.perf_counter() - t0)
        finally:
            ties.DRIFT_NATS.update(saved)
        t = _p50(times)
        prompt = sum(d.usage["prompt_tokens"] for d in ds)
        P = ds[0].usage["shared_prefix_tokens"]
        reused = P * (n - 1) if P else 0
        out["sizes"][str(n)] = {
            "contexts": n, "p50_s": t, "field_decisions_per_s": n * fields / t, "decisions_per_s": n / t,
            "prompt_tokens": prompt, "shared_prefix_tokens": P, "tokens_reused": reused,
            "prefix_hit": reused / prompt, "passes": ds[0].usage["passes"],
            "near_tie_fields": sum(_gap(f) <= drift for d in ds for f in d.fields.values()),
            "packing": ds[0].usage["packing"]}
        progress(f"decide_many n={n}: p50 {t*1e3:.0f} ms, {n * fields / t:.0f} field decisions/s, "
                 f"prefix {P} tokens shared ({reused} reused)")
    if sizes:  # what near-tie safety costs: the smallest batch with it on
        n = min(sizes)
        ctxs1 = contexts(engine, n, tokens)
        t0 = time.perf_counter()
        d1 = decide_many(schema, ctxs1, engine=engine)
        engine.sync()
        out["with_rescoring"] = {"contexts": n, "s": time.perf_counter() - t0, "rescored_fields": sum(
            f.score_source == "rescored_one_row" for d in d1 for f in d.fields.values())}
    diffs, same = [], True
    for ctx, d in list(zip(ctxs, ds))[:parity_contexts]:
        ref = decide(schema, ctx, engine=engine, packing="expand", max_rows=1)
        for name, f in d.fields.items():
            if f.score_source == "batched":
                diffs += [abs(x - y) for x, y in zip(f.log_scores.values(), ref.fields[name].log_scores.values())]
        same &= d.value_dict() == ref.value_dict()
    out["parity"] = {"contexts": min(parity_contexts, len(ds)), "max_abs_log_score_diff": max(diffs, default=0.0),
                     "same_values": same}
    return out


def run_bench(engine, *, preset: str = "support_triage", example: int = 0, runs: int = 5, naive_runs: int = 2,
              warmup: int = 1, packings=("packed", "fused", "expand"), scorings=("labels", "slots"), progress=print) -> dict:
    p = presets.load(preset)
    schema, context = p["schema"], p["examples"][example]
    out: dict = {"model": engine.name, "device": str(engine.device), "dtype": str(engine.dtype).replace("torch.", ""),
                 "machine": _machine(engine), "preset": preset, "fields": len(schema.fields), "runs": runs,
                 "naive_runs": naive_runs, "tolerance_nats": TOLERANCE,
                 "invariant": engine.runner.capabilities.invariant}

    # The same prompt every round: with the prefix cache on, a decision and the bare prefill would read almost all
    # of it from the cache (bench prefix-cache measures that); here both compute it whole.
    cache = engine.runner.prefix_cache
    limit = cache.limit_bytes if cache is not None else 0
    if cache is not None:
        cache.set_limit(0)
    try:
        _single_rounds(engine, schema, context, out, runs, naive_runs, warmup, packings, scorings, progress)
    finally:
        if cache is not None:
            cache.set_limit(limit)
    return out


def _single_rounds(engine, schema, context, out, runs, naive_runs, warmup, packings, scorings, progress) -> None:
    # Round-robin: every round runs each measurement once, so load changes on a shared machine hit
    # every configuration alike (p50 over rounds).
    ids = {sc: prompt_ids(engine, plan_for(schema, engine, sc), context) for sc in scorings}
    out["prompt_tokens"] = {sc: len(v) for sc, v in ids.items()}
    jobs = {f"prefill/{sc}": (lambda sc=sc: prefill(engine, ids[sc])) for sc in scorings}
    for sc in scorings:
        for pk in packings:
            jobs[f"{sc}/{pk}"] = lambda sc=sc, pk=pk: decide(schema, context, engine=engine, scoring=sc, packing=pk)
    jobs["naive"] = lambda: naive_generate(schema, context, engine=engine)
    samples: dict = {k: [] for k in jobs}
    for _ in range(warmup):
        for k, fn in jobs.items():
            if k != "naive":
                fn()
    for rnd in range(max(runs, naive_runs)):
        for k, fn in jobs.items():
            if (k == "naive" and rnd >= naive_runs) or (k != "naive" and rnd >= runs):
                continue
            t0 = time.perf_counter()
            r = fn()
            engine.sync()
            samples[k].append((time.perf_counter() - t0, r))
        progress(f"round {rnd + 1}: " + ", ".join(f"{k} {samples[k][-1][0]*1e3:.0f} ms" for k in jobs
                                                  if len(samples[k]) == rnd + 1))

    prefill_p50 = {sc: _p50([t for t, _ in samples[f"prefill/{sc}"]]) for sc in scorings}
    out["prefill_p50_s"] = prefill_p50
    configs = {}
    for sc in scorings:
        for pk in packings:
            res = samples[f"{sc}/{pk}"]
            ds = [r for _, r in res]
            c = {"total_p50_s": _p50([t for t, _ in res]), "prefill_p50_s": _p50([d.timings["prefill"] for d in ds]),
                 "scoring_p50_s": _p50([d.timings["scoring"] for d in ds]), "rows": ds[0].usage["rows"],
                 "scored_tokens": ds[0].usage["scored_tokens"], "passes": ds[0].usage["passes"],
                 "mean_log_legal_mass": statistics.fmean(f.log_legal_mass for f in ds[0].fields.values()),
                 "rescored_fields": sum(f.score_source == "rescored_one_row" for f in ds[0].fields.values()),
                 "cached_prompt_tokens": max(d.usage["cached_prompt_tokens"] for d in ds),
                 "value": ds[0].value_dict()}
            c["scoring_over_bare_prefill"] = c["scoring_p50_s"] / prefill_p50[sc]
            c["decide_over_bare_prefill"] = c["total_p50_s"] / prefill_p50[sc]  # issue 11 target: <= 1.3
            # what a decision costs beyond reading the prompt once (fused has no separate prefill)
            c["overhead_over_bare_prefill"] = (c["total_p50_s"] - prefill_p50[sc]) / prefill_p50[sc]
            configs[f"{sc}/{pk}"] = c
        # parity: batched vs one row per forward, same prompt
        a = decide(schema, context, engine=engine, scoring=sc)
        b = decide(schema, context, engine=engine, scoring=sc, packing="expand", max_rows=1)
        diff = max(abs(x - y) for n in a.fields for x, y in zip(a.fields[n].log_scores.values(),
                                                                b.fields[n].log_scores.values()))
        out.setdefault("parity", {})[sc] = {"max_abs_log_score_diff": diff, "same_values": a.value_dict() == b.value_dict(),
                                            "within_tolerance": diff <= TOLERANCE}
    out["decide"] = configs

    res = samples["naive"]
    if res:
        g = res[0][1]
        naive_val = json.loads(g.text) if g.schema_valid else {}
        out["naive"] = {"total_p50_s": _p50([t for t, _ in res]), "completion_tokens": g.completion_tokens,
                        "finish_reason": g.finish_reason, "schema_valid": g.schema_valid,
                        "prefill_s": g.timings["prefill"], "decode_s": g.timings["decode"]}
        progress(f"naive JSON generation p50 {out['naive']['total_p50_s']*1e3:.0f} ms "
                 f"({g.completion_tokens} tokens, valid={g.schema_valid})")
        for key, c in configs.items():
            c["speedup_vs_naive"] = out["naive"]["total_p50_s"] / c["total_p50_s"]
            scal = [f.name for f in schema.fields if f.type != "multi"]
            c["agreement_with_naive"] = (sum(c["value"][n] == naive_val.get(n) for n in scal) / len(scal)
                                         if naive_val else None)


def _single_lines(r: dict) -> list[str]:
    lines = [f"Preset `{r['preset']}` ({r['fields']} fields), {r['dtype']}, batch-invariant scoring "
             f"{'on' if r.get('invariant') else 'off'}, p50 of {r['runs']} runs "
             f"(naive: {r['naive_runs']}), prefix cache off (each prompt computed whole). Prompt tokens: "
             f"{r['prompt_tokens']}.", "",
             "| config | p50 total ms | prefill ms | scoring ms | scoring / bare prefill "
             "| decide / bare prefill (target ≤ 1.3) | rows | passes | fields rescored "
             "| speedup vs naive | agreement w/ naive | mean log legal mass |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for k, c in r["decide"].items():
        sp = c.get("speedup_vs_naive")
        ag = c.get("agreement_with_naive")
        lines.append(f"| {k} | {c['total_p50_s']*1e3:.1f} | {c['prefill_p50_s']*1e3:.1f} | {c['scoring_p50_s']*1e3:.1f} "
                     f"| {c['scoring_over_bare_prefill']:.2f} | {c['decide_over_bare_prefill']:.2f} "
                     f"| {c['rows']} | {c['passes']} | {c['rescored_fields']} "
                     f"| {'' if sp is None else f'{sp:.1f}x'} | {'' if ag is None else f'{ag:.2f}'} "
                     f"| {c['mean_log_legal_mass']:.2f} |")
    for s, v in r["prefill_p50_s"].items():
        lines.append(f"| bare prefill ({s} prompt) | {v*1e3:.1f} | | | | | | | | | | |")
    if "naive" in r:
        n = r["naive"]
        lines.append(f"| naive JSON generation | {n['total_p50_s']*1e3:.1f} | {n['prefill_s']*1e3:.1f} | "
                     f"decode {n['decode_s']*1e3:.0f} ({n['completion_tokens']} tokens) | | | | | | 1.0x | | |")
    lines += ["", "Parity (batched vs one row per forward): " + ", ".join(
        f"{s}: max |Δ log-score| {p['max_abs_log_score_diff']:.2e} nats, same values {p['same_values']}"
        for s, p in r["parity"].items())]
    return lines


def to_markdown(r: dict, command: str) -> str:
    lines = [f"# bench decide — {r['model']} on {r['machine']}", "", f"Command: `{command}`", ""]
    for setting, part in r.get("invariance", {}).items():
        lines += [f"## batch-invariant scoring {setting}", ""] + _result_lines(part) + [""]
    return "\n".join(lines + _result_lines(r)) + "\n"


def _result_lines(r: dict) -> list[str]:
    lines: list[str] = []
    if "decide" in r:
        lines += _single_lines(r)
    m = r.get("many")
    if m:
        lines += ["", f"`decide_many`, preset `{r['preset']}` ({r['fields']} fields), contexts of ~{m['context_tokens']} "
                  "tokens, default packing and prior (target on the H200: ≥ 2,000 field decisions/s):", "",
                  "| contexts | p50 s | field decisions/s | decisions/s | shared prefix tokens | tokens reused "
                  f"| prefix hit | prompt tokens | passes / context | near-tie fields (gap ≤ {m['drift_nats']:g}) | packing |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for n, c in m["sizes"].items():
            lines.append(f"| {n} | {c['p50_s']:.3f} | {c['field_decisions_per_s']:.0f} | {c['decisions_per_s']:.1f} "
                         f"| {c['shared_prefix_tokens']} | {c['tokens_reused']} | {c['prefix_hit']:.0%} "
                         f"| {c['prompt_tokens']} | {c['passes']} | {c['near_tie_fields']} | {c['packing']} |")
        w = m.get("with_rescoring")
        if w:
            lines += ["", f"Throughput above: batched scoring alone (near-tie rescoring off). With it on (the default), "
                      f"{w['contexts']} context(s): {w['s']:.3f} s, {w['rescored_fields']} field(s) rescored one row at "
                      "a time."]
        p = m["parity"]
        lines += ["", f"decide_many parity (first {p['contexts']} contexts of the largest batch vs one row per "
                  f"forward, batched fields): max |Δ log-score| {p['max_abs_log_score_diff']:.2e} nats, "
                  f"same values {p['same_values']}"]
    return lines


def _one_setting(engine, preset, skip_single, runs, naive_runs, sizes, many_runs, say) -> dict:
    if skip_single:
        r = {"model": engine.name, "device": str(engine.device), "machine": _machine(engine),
             "dtype": str(engine.dtype).replace("torch.", ""), "preset": preset,
             "fields": len(presets.load(preset)["schema"].fields),
             "invariant": engine.runner.capabilities.invariant}
    else:
        r = run_bench(engine, preset=preset, runs=runs, naive_runs=naive_runs, progress=say)
    if sizes:
        r["many"] = run_many(engine, preset=preset, sizes=sizes, runs=many_runs, progress=say)
    return r
