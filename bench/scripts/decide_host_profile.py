"""Host work of a later decision (issue 25), on this CPU: a random 28-layer Qwen2 as *narrow* as can be (the 7B's
layer count, vocabulary and tokenizer, hidden 128), so the forwards cost little and what is left is the Python and
the small torch calls around them: the prompt, the plan's row tree, the prefix-cache match and its KV, staging,
the graph pass (run eagerly here, at the padded bucket sizes), reading the logits and scoring the tries.
Batch-invariant scoring on, preset support_triage, ~100-token contexts, the plan prefix cached by a first call.
``stub``: after the first calls, the graph pass's layers are replaced by zeros of its output's shape (what the
GPU runs inside one replay), so only the host work is left (its probabilities are then meaningless).
Prints JSON: p50 wall of the later decisions, the function calls they make; the top functions by own time to stderr.

    python bench/scripts/decide_host_profile.py [runs] [stub [pre]] [cum] [callers] [callees]
"""

import cProfile
import io
import json
import pstats
import statistics
import sys
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from typedlm.testing.contexts import contexts
from typedlm.testing.archs import ARCHS, qwen_tokenizer
from typedlm.decide import decide, presets
from typedlm.engine import engine_from_model

runs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
torch.manual_seed(0)
torch.set_num_threads(1)
kw = {**ARCHS["qwen2.5-7b"], "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
      "num_key_value_heads": 2}
cfg = AutoConfig.for_model(kw.pop("model_type"), **kw)
model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
engine = engine_from_model(model, qwen_tokenizer(), name="narrow-qwen2-28l", device="cpu", dtype=torch.float32)
runner = engine.runner
assert runner.set_invariant(True)
if runner.score_graphs is not None:
    runner.score_graphs.enabled = True  # the graph's code, run eagerly (no CUDA here)
schema = presets.load("support_triage")["schema"]
ctxs = contexts(engine, 2 * runs + 2, 100, seed=7)
decide(schema, ctxs[-1], engine=engine)  # first call: the plan prefix cached
decide(schema, ctxs[-2], engine=engine)  # warm
stub = "stub" in sys.argv[2:]
marks: list[float] = []
pr = cProfile.Profile()
if stub:  # what the GPU would run: the graph's layers, the lm_head, the log-softmax over the vocabulary
    import typedlm.decide.passes as score_mod

    zeros = torch.zeros(512, cfg.hidden_size)
    logits = torch.zeros(512, cfg.vocab_size)

    def replay(b, cols):
        marks.append(time.perf_counter())
        if "pre" in sys.argv[2:]:  # profile only the host work before the pass (the GPU idles through it)
            pr.disable()
        return zeros[:b]

    runner.score_graphs._run = replay
    runner.model.lm_head.forward = lambda x: logits[:x.shape[0]]
    score_mod.invariant_log_softmax = lambda x: x
walls, before = [], []
for c in ctxs[:runs]:
    t0 = time.perf_counter()
    d = decide(schema, c, engine=engine)
    walls.append(time.perf_counter() - t0)
    if marks:
        before.append(marks[-1] - t0)
for c in ctxs[runs:2 * runs]:
    pr.enable()
    decide(schema, c, engine=engine)
    pr.disable()
buf = io.StringIO()
st = pstats.Stats(pr, stream=buf)
st.sort_stats("tottime").print_stats(30)
print(json.dumps({"command": " ".join(["python", *sys.argv]), "p50_ms": statistics.median(walls) * 1e3,
                  "walls_ms": [round(w * 1e3, 2) for w in walls],
                  "before_pass_p50_ms": statistics.median(before) * 1e3 if before else None, "calls_per_decision": st.total_calls // runs,
                  "graphed": runner.score_graphs is not None and runner.score_graphs.passes > 0,
                  "cached_prompt_tokens": d.usage["cached_prompt_tokens"], "prompt_tokens": d.usage["prompt_tokens"],
                  "scored_tokens": d.usage.get("scored_tokens")}, indent=1))
print(buf.getvalue(), file=sys.stderr)
if "callers" in sys.argv[2:]:
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_callers(r"torch\.(cat|tensor|zeros|stack|logsumexp)|clone|pin_memory|copy_|index_select")
    print(buf.getvalue(), file=sys.stderr)
if "cum" in sys.argv[2:]:
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("cumtime").print_stats(r"typedlm|tokenizers|transformers", 45)
    print(buf.getvalue(), file=sys.stderr)
if "callees" in sys.argv[2:]:
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("cumtime").print_callees(r"score_contexts|_pass_contexts|_gather|score_graph.py.*\(run\)")
    print(buf.getvalue(), file=sys.stderr)
