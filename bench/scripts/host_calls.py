"""Host work of a decode loop and a decision, counted in Python function calls (cProfile): a measure that
does not depend on how loaded the machine is (the forwards' torch kernels are the same whatever the Python
around them, so on a CPU the calls are what a refactor of the engine can change). Prints JSON.

    python bench/scripts/host_calls.py            # from a checkout (or a copy of an older commit's tree)
Used for the runner redesign's CPU A/B (bench/results/runner-ab-cpu.md)."""

import cProfile
import json
import pstats
import sys
import time

import torch

from typedlm.decide import decide, presets
from typedlm.engine import engine_from_model
from typedlm.generate import SamplingParams, build_sequence
from typedlm.generate.scheduler import run_batch
from typedlm.grammar import make_constraint
from typedlm.testing import default_tokenizer, tiny_llama

torch.manual_seed(0)
torch.set_num_threads(1)
tok = default_tokenizer()
engine = engine_from_model(tiny_llama(tok), tok, name="tiny")
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}, "required": ["name", "n"]}


def gen(batch: int, constraint) -> None:
    ids = engine.encode_prompt(prompt="Write something about the weather today.")
    seqs = [build_sequence(engine, ids, SamplingParams(max_tokens=48, temperature=0), constraint) for _ in range(batch)]
    run_batch(engine, seqs, max_batch=batch)


p = presets.load("support_triage")
jobs = {"gen b1 free": lambda: gen(1, None), "gen b8 free": lambda: gen(8, None),
        "gen b8 json": lambda: gen(8, make_constraint(json_schema=SCHEMA, any_whitespace=False)),
        "decide support_triage": lambda: decide(p["schema"], p["examples"][0], engine=engine)}
out = {}
for name, fn in jobs.items():
    fn()  # warm-up: plans, grammars, allocator
    prof = cProfile.Profile()
    t0 = time.process_time()
    prof.enable()
    fn()
    prof.disable()
    cpu = time.process_time() - t0
    st = pstats.Stats(prof)
    out[name] = {"python_calls": st.total_calls, "primitive_calls": st.prim_calls, "cpu_s": round(cpu, 3)}
json.dump(out, sys.stdout, indent=1)
print()
