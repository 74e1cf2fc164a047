"""CUDA check of decide beside streams (typedlm.server.interleave): with a long stream decoding on the
scheduler (StaticKV + CUDA graphs), a decision run ``parallel`` (worker thread, own CUDA stream) and one run
``interleaved`` (forwards queued between decode steps) both finish while the stream keeps producing tokens,
and give the decision computed alone (same values; probabilities within bf16 batch-shape drift).

    python3 bench/scripts/gpu_interleave_check.py MODEL_DIR [OUT.json]

Prints JSON; exits 1 on a violation. Not run in CI (no GPU)."""

import asyncio
import json
import sys
import time

import torch

from typedlm.decide import decide, presets
from typedlm.engine import load_engine
from typedlm.generate.api import build_sequence
from typedlm.generate.sampling import SamplingParams
from typedlm.generate.scheduler import Request, Scheduler
from typedlm.grammar.spec import make_constraint
from typedlm.server.interleave import run_stepwise

device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU run is a smoke test of the script
engine = load_engine(sys.argv[1], device=device, progress=False)
p = presets.load("support_triage")
context = " ".join(p["examples"] * 2)
alone = decide(p["schema"], context, engine=engine)
sched = Scheduler(engine).start()
times: list[float] = []
seq = build_sequence(engine, engine.encode_prompt(prompt="go"), SamplingParams(max_tokens=100000, temperature=0),
                     make_constraint(regex="[a-z]{100000}"))
req = sched.submit(Request(seq=seq, on_event=lambda ev: times.append(time.perf_counter())))
while len(times) < 5:
    time.sleep(0.01)
report, bad = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "model": engine.name, "modes": {}}, []
for mode in ("parallel", "interleaved"):
    t0 = time.perf_counter()
    got = asyncio.run(run_stepwise(engine, sched, decide, p["schema"], context, prefill_chunk=256, row_chunk=1,
                                   parallel=mode == "parallel"))
    t1 = time.perf_counter()
    drift = max(abs(got.fields[n].probabilities[k] - f.probabilities[k])
                for n, f in alone.fields.items() for k in f.probabilities)
    during = [b - a for a, b in zip(times, times[1:]) if t0 < a and b < t1]
    r = {"decide_s": round(t1 - t0, 3), "tokens_during": len(during),
         "itl_ms_max_during": round(1e3 * max(during), 2) if during else None,
         "same_values": got.value == alone.value, "max_prob_drift": round(drift, 4)}
    report["modes"][mode] = r
    if not (r["same_values"] and drift < 0.05 and len(during) > 10):
        bad.append(mode)
sched.cancel(req)
sched.stop()
report["ok"] = not bad
print(json.dumps(report, indent=2))
if len(sys.argv) > 2:
    json.dump(report, open(sys.argv[2], "w"), indent=2)
sys.exit(1 if bad else 0)
