"""CUDA check of the whole engine on a random-weight real architecture (bf16, real 151k vocabulary):
every constraint kind through generate(), a mixed batch of 8 rows through the scheduler (each row
valid for its own constraint), and decide / decide_many on two presets. Prints JSON; exits 1 on a
violation. Run on the lent H200 (bench/results/gpu-check-h200.json holds the committed output).
``python bench/gpu_check.py ARCH ops``: only the invariant kernels' checks (no model).
``python bench/gpu_check.py ARCH deterministic``: greedy rows after slot reuse vs solo, deterministic mode off/on.
``python bench/gpu_check.py ARCH invariance``: only the batch-invariance check (issue 20): the invariant ops
in bf16, decide batched vs one-row and decide_many vs solo, invariance on and off, and decide / decide_many
beside 4 streams vs alone (bench/results/gpu-invariance-h200.json)."""

import json
import re
import sys
import time

import jsonschema
import torch

from typedlm.decide import decide, decide_many
from typedlm.generate import generate
from typedlm.testing.archs import random_engine
from typedlm.decide import presets
from typedlm.generate import SamplingParams, build_sequence
from typedlm.generate.scheduler import run_batch
from typedlm.grammar import make_constraint

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-0.5b"
engine = random_engine(arch, device="cuda") if sys.argv[2:] != ["ops"] else None  # "ops": the kernels alone


def _ops_check() -> dict:
    """The invariant ops on CUDA bf16: each row's bits alone vs in batches of 1, 2, 7, 64, 300 rows."""
    from typedlm.runner.invariant import attention as inv_attention
    from typedlm.runner.invariant import ops, triton_attention, triton_ops

    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(300, 3584, device=dev, dtype=bf)
    w = torch.randn(4096, 3584, device=dev, dtype=bf) * 0.02
    out = {}
    for name, fn in {"linear": lambda t: ops.linear(t, w), "torch_linear": lambda t: torch.nn.functional.linear(t, w),
                     "triton_linear": lambda t: triton_ops.linear(t, w),
                     "rms_norm": lambda t: ops.rms_norm(t, w[0], 1e-6), "log_softmax": ops.log_softmax,
                     "triton_rms_norm": lambda t: triton_ops.rms_norm(t, w[0], 1e-6)}.items():
        alone = torch.cat([fn(x[i:i + 1]) for i in range(64)])
        out[name] = max(float((fn(x[:n])[:min(n, 64)].float() - alone[:min(n, 64)].float()).abs().max())
                        for n in (1, 2, 7, 64, 300))
    out["triton_linear_vs_torch"] = float((triton_ops.linear(x, w).float() - x.float() @ w.float().t()).abs().max())
    out["torch_linear_vs_torch"] = float((torch.nn.functional.linear(x, w).float() - x.float() @ w.float().t())
                                         .abs().max())
    out["triton_rms_norm_vs_ops"] = float((triton_ops.rms_norm(x, w[0], 1e-6).float()
                                           - ops.rms_norm(x, w[0], 1e-6).float()).abs().max())
    H, kvh, d, n, K = 28, 4, 128, 700, 1600
    keys, vals = torch.randn(1, kvh, n, d, device=dev, dtype=bf), torch.randn(1, kvh, n, d, device=dev, dtype=bf)
    q = torch.randn(1, H, 1, d, device=dev, dtype=bf)
    spots = torch.sort(torch.randperm(K, device=dev)[:n]).values
    bk, bv = torch.randn(1, kvh, K, d, device=dev, dtype=bf), torch.randn(1, kvh, K, d, device=dev, dtype=bf)
    bk[:, :, spots], bv[:, :, spots] = keys, vals
    allow = torch.rand(1, 300, K, device=dev) < 0.5
    allow[0, 7] = False
    allow[0, 7, spots] = True
    qs = torch.randn(1, H, 300, d, device=dev, dtype=bf)
    qs[:, :, 7] = q[:, :, 0]
    for name, fn in {"attention": inv_attention.attention, "triton_attention": triton_attention.attention}.items():
        alone = fn(q, keys, vals, None, d ** -0.5)
        got = fn(qs, bk, bv, allow[:, None], d ** -0.5)
        out[f"{name}_scattered_keys"] = float((got[:, 7].float() - alone[:, 0].float()).abs().max())
        out[f"{name}_vs_sdpa"] = float((got.float() - _sdpa(qs, bk, bv, allow)).abs().max())
    return out


def _sdpa(q, k, v, allow):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    o = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=allow[:, None])
    return o.transpose(1, 2)


def _log_scores(d) -> dict:
    return {n: list(f.log_scores.values()) for n, f in d.fields.items()}


def _diff(a, b) -> float:
    return max(abs(x - y) for n in a for x, y in zip(a[n], b[n]))


def invariance_check() -> dict:
    """bf16 decide: batched (default packing) vs one row per forward; decide_many (16 contexts) first 4 vs
    solo; with batch-invariant scoring on and off (issue 20)."""
    from typedlm.testing.contexts import contexts

    out = {"ops_max_abs_diff": _ops_check()}
    for setting in ("on", "off"):
        engine.runner.set_invariant(setting == "on")
        rep = {}
        for name in ("support_triage", "content_moderation"):
            schema = presets.load(name)["schema"]
            ctx = presets.load(name)["examples"][0]
            a = decide(schema, ctx, engine=engine, prior="none")
            b = decide(schema, ctx, engine=engine, prior="none", packing="expand", max_rows=1)
            ctxs = contexts(engine, 16, 400)
            many = decide_many(schema, ctxs, engine=engine, prior="none")
            solo = [decide(schema, c, engine=engine, prior="none", packing="expand", max_rows=1) for c in ctxs[:4]]
            rep[name] = {
                "decide": {"max_abs_diff": _diff(_log_scores(a), _log_scores(b)), "same_values": a.value_dict() ==
                           b.value_dict(), "rescored_fields": sum(f.score_source == "rescored_one_row"
                                                                  for f in a.fields.values())},
                "decide_many_first4": {"max_abs_diff": max(_diff(_log_scores(m), _log_scores(s))
                                                           for m, s in zip(many, solo)),
                                       "same_values": all(m.value_dict() == s.value_dict() for m, s in zip(many, solo))}}
        out[f"invariant_{setting}"] = rep
    engine.runner.set_invariant(True)
    from typedlm.bench.beside import decide_beside_streams
    from typedlm.bench.decide import contexts as many_contexts

    p = presets.load("support_triage")  # issue 34: decisions beside 4 streams vs alone, invariance on
    out["beside_streams"] = decide_beside_streams(engine, p["schema"], many_contexts(engine, 8, 400), streams=4)
    return out


def _slot_reuse() -> str:
    """12 greedy rows through 4 slots (reused after eviction): how many equal their solo run."""
    prompts = [f"row {i} " * (1 + i % 5) for i in range(12)]
    solo = [generate(p, engine=engine, temperature=0, max_tokens=8 + 3 * (i % 4)).token_ids
            for i, p in enumerate(prompts)]
    seqs = [build_sequence(engine, engine.encode_prompt(prompt=p),
                           SamplingParams(max_tokens=8 + 3 * (i % 4), temperature=0), None)
            for i, p in enumerate(prompts)]
    batched = [x.token_ids for x in run_batch(engine, seqs, max_batch=4)]
    return f"{sum(a == b for a, b in zip(batched, solo))}/12"


def deterministic_check() -> dict:
    """Greedy generation after slot reuse vs solo with deterministic mode off and on (issue 20), and the seconds
    each round took (solo runs + the batch; the first includes graph capture)."""
    out = {}
    for setting in ("off", "on"):
        engine.runner.set_deterministic(setting == "on")
        t0 = time.perf_counter()
        out[setting] = {"slot_reuse_rows_equal_solo": _slot_reuse(), "seconds": round(time.perf_counter() - t0, 2)}
    engine.runner.set_deterministic(False)
    engine.runner.set_invariant(True)
    return out


if sys.argv[2:] == ["deterministic"]:
    r = deterministic_check()
    print(json.dumps({"arch": arch, "device": torch.cuda.get_device_name(0), "deterministic": r}, indent=1))
    sys.exit(0 if r["on"]["slot_reuse_rows_equal_solo"] == "12/12" else 1)
if sys.argv[2:] == ["ops"]:
    print(json.dumps({"device": torch.cuda.get_device_name(0), "ops_max_abs_diff": _ops_check()}, indent=1))
    sys.exit(0)
if sys.argv[2:] == ["invariance"]:
    r = invariance_check()
    print(json.dumps({"arch": arch, "device": torch.cuda.get_device_name(0), "invariance": r}, indent=1))
    sys.exit(0 if all(v["max_abs_diff"] == 0 for p in r["invariant_on"].values() for v in p.values())
             and r["beside_streams"]["max_abs_diff"] == 0 else 1)
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
          "maximum": 999}, "tag": {"enum": ["a", "b", "c"]}, "s": {"type": "string", "maxLength": 10}},
          "required": ["ok", "n", "tag", "s"]}
KINDS = {
    "json_schema": (dict(json_schema=SCHEMA), lambda t: jsonschema.validate(json.loads(t), SCHEMA) is None),
    "json_object": (dict(json_object=True), lambda t: isinstance(json.loads(t), dict)),
    "regex": (dict(regex=r"[A-Z]{3}-\d{4}"), lambda t: bool(re.fullmatch(r"[A-Z]{3}-\d{4}", t))),
    "choice": (dict(choice=['say "hi"', "naïve\n", "x\\y"]), lambda t: t in ('say "hi"', "naïve\n", "x\\y")),
    "grammar": (dict(grammar='root ::= ("ab" | "cd") [0-9] [0-9]?'), lambda t: bool(re.fullmatch(r"(ab|cd)\d\d?", t))),
    "lark": (dict(lark='start: "k=" /[a-z]{1,4}/\n'), lambda t: bool(re.fullmatch(r"k=[a-z]{1,4}", t))),
}
report = {"arch": arch, "device": torch.cuda.get_device_name(0), "generate": {}, "batch": {}, "decide": {}}
bad = []
for kind, (kw, ok) in KINDS.items():
    rows = []
    for seed in range(4):
        r = generate("hello", engine=engine, seed=seed, max_tokens=400, **kw)
        # a random model in an unbounded JSON string may hit max_tokens: "length" is reported, while a
        # finished ("stop") output that is invalid, or any "error", is a violation
        rows.append(r.finish_reason)
        if r.finish_reason == "error" or (r.finish_reason == "stop" and not ok(r.text)):
            bad.append({"kind": kind, "seed": seed, "result": r.to_dict()})
    report["generate"][kind] = {"stop_and_valid": rows.count("stop"), "length": rows.count("length"),
                                "runs": len(rows)}

cs = [None, make_constraint(json_schema=SCHEMA), make_constraint(regex=r"[A-Z]{3}-\d{4}"), None,
      make_constraint(choice=["yes", "no"]), make_constraint(json_object=True), None, make_constraint(json_schema=SCHEMA)]
checks = [None, KINDS["json_schema"][1], KINDS["regex"][1], None, lambda t: t in ("yes", "no"),
          KINDS["json_object"][1], None, KINDS["json_schema"][1]]
seqs = [build_sequence(engine, engine.encode_prompt(prompt=f"prompt number {i} " * (i + 1)),
                       SamplingParams(max_tokens=300, temperature=1.0, seed=i), c) for i, c in enumerate(cs)]
t0 = time.perf_counter()
results = run_batch(engine, seqs, max_batch=8)
report["batch"]["wall_s"] = round(time.perf_counter() - t0, 2)
report["batch"]["rows"] = []
for c, chk, r in zip(cs, checks, results):
    valid = None if chk is None or r.finish_reason != "stop" else chk(r.text)
    report["batch"]["rows"].append({"constraint": c.kind if c else None, "finish": r.finish_reason,
                                    "tokens": r.completion_tokens, "valid": valid})
    if valid is False or r.finish_reason == "error":
        bad.append({"batch_row": c.kind, "result": r.to_dict()})

for name in ("content_moderation", "invoice_routing"):
    p = presets.load(name)
    d = decide(p["schema"], p["examples"][0], engine=engine)
    many = decide_many(p["schema"], p["examples"][:2], engine=engine)
    same = many[0].to_dict()["value"] == d.to_dict()["value"]
    report["decide"][name] = {"fields": len(d.fields), "timings_ms": {k: round(v * 1e3, 1) for k, v in d.timings.items()},
                              "decide_many_first_equals_decide": same}

# -- static KV + CUDA graphs (issue 11) ----------------------------------------------------------

sk = {}
kv = engine.runner.decode_cache(8)
sk["kv"] = type(kv).__name__
t0 = time.perf_counter()
engine.runner.capture(kv, 512)
sk["capture_s"] = round(time.perf_counter() - t0, 2)
fw = engine.runner.forwards(kv)
sk["graphs"] = len(fw.graphs)
# 1. a graph replay equals the eager decode of the same inputs
prompt = engine.encode_prompt(prompt="The static cache check: " * 4)
with torch.inference_mode():
    s0 = kv.acquire()
    fw.prefill(torch.tensor([prompt], device="cuda"), [s0])
    n = kv.length[s0]
    graph_logits = fw.step([42], [s0])
    kv.length[s0] = n  # feed the same token at the same position, eagerly
    fw._io[0, 0], fw._io[1, 0] = 42, n
    eager = fw._decode(1, 256)[0]
    kv.release(s0)
sk["graph_vs_eager_max_abs"] = float((graph_logits[0] - eager).abs().max())
# 2. greedy typedlm (static KV, graphs) vs HF generate (eager, DynamicCache), same prompt
r = generate("The static cache check", engine=engine, temperature=0, max_tokens=48)
ids = torch.tensor([engine.encode_prompt(prompt="The static cache check")], device="cuda")
with torch.inference_mode():
    hf = engine.model.generate(ids, max_new_tokens=48, do_sample=False, attention_mask=torch.ones_like(ids),
                               pad_token_id=sorted(engine.stop_ids)[0])[0, ids.shape[1]:].tolist()
same = 0
for a, b in zip(r.token_ids, hf):
    if a != b:
        break
    same += 1
sk["greedy_prefix_equal_to_hf"] = f"{same}/{min(len(r.token_ids), len(hf))}"
# 3. slots reused after eviction: 12 rows through 4 slots, each equal to its solo run
sk["slot_reuse_rows_equal_solo"] = _slot_reuse()
report["static_kv"] = sk
print(json.dumps(report, indent=1))
if bad or sk["graph_vs_eager_max_abs"] > 0.5:
    print(json.dumps(bad, indent=1)[:4000])
    sys.exit(1)
