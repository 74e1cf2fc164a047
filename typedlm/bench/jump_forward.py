"""``typedlm bench jump-forward``: decode with and without jump-forward on JSON-heavy schemas.

Greedy, the same prompt and schema for both runs; per schema and batch size it reports emitted
tokens, draft tokens fed for verification (``drafted``) and those the model confirmed (``forced``:
appended without a step of their own), scheduler steps (one batched forward each), wall time,
tokens/s and the speed-up, plus how many rows produced the same text both ways (every row should:
drafts are verified, :mod:`typedlm.grammar.jump_forward`; every output is also checked against the
schema). The gain depends on how often the model itself picks the canonical tokenization of the
forced text: a trained model mostly does, a random-weight one rarely.

Subject: ``--arch tiny`` (CPU smoke), or a random-weight real architecture with its real
vocabulary (``--arch qwen2.5-0.5b`` / ``qwen2.5-7b``, ``--device cuda``), or ``--model default``
(the embedded SmolLM2).
"""

from __future__ import annotations

import platform
import time

from rich.console import Console
from rich.table import Table
import torch

from ..generate import SamplingParams, build_sequence
from ..generate.requests import Request
from ..generate.scheduler import Scheduler
from ..grammar import make_constraint


PROMPT = "Fill in the customer record for Ada Lovelace, London, as JSON."
_ADDRESS = {"type": "object", "properties": {
    "street_address_line": {"type": "string", "maxLength": 12},
    "postal_code_identifier": {"type": "string", "pattern": "^[0-9]{5}$"},
    "country_iso_code": {"enum": ["GB", "FR", "DE", "US"]}},
    "required": ["street_address_line", "postal_code_identifier", "country_iso_code"], "additionalProperties": False}
SCHEMAS = {
    "record": {"type": "object", "properties": {
        "customer_identifier_number": {"type": "integer", "minimum": 0, "maximum": 9999},
        "customer_full_legal_name": {"type": "string", "maxLength": 16},
        "is_premium_subscription_active": {"type": "boolean"},
        "preferred_contact_channel": {"enum": ["electronic_mail_message", "telephone_call", "postal_letter"]},
        "primary_residential_address": _ADDRESS,
        "secondary_billing_address": _ADDRESS},
        "required": ["customer_identifier_number", "customer_full_legal_name", "is_premium_subscription_active",
                     "preferred_contact_channel", "primary_residential_address", "secondary_billing_address"],
        "additionalProperties": False},
    "list_of_records": {"type": "object", "properties": {"entries": {
        "type": "array", "minItems": 3, "maxItems": 3, "items": {"type": "object", "properties": {
            "measurement_station_name": {"enum": ["north_ridge_observatory", "south_valley_station"]},
            "measured_temperature_celsius": {"type": "integer", "minimum": -50, "maximum": 50},
            "measurement_quality_flag": {"enum": ["verified_by_operator", "automatic_unverified"]}},
            "required": ["measurement_station_name", "measured_temperature_celsius", "measurement_quality_flag"],
            "additionalProperties": False}}},
        "required": ["entries"], "additionalProperties": False},
}


def run(engine, ids, constraint, batch: int, jump: bool, max_tokens: int) -> tuple[dict, list]:
    params = SamplingParams(max_tokens=max_tokens, temperature=0)
    seqs = [build_sequence(engine, ids, params, constraint, jump_forward=jump) for _ in range(batch)]
    sched = Scheduler(engine, max_batch=batch, max_queue=batch)
    reqs = [sched.submit(Request(seq=s)) for s in seqs]
    engine.sync()
    t0 = time.perf_counter()
    steps = 0
    while sched.has_work():
        sched.step()
        steps += 1
    engine.sync()
    wall = time.perf_counter() - t0
    res = [r.result for r in reqs]
    tokens = sum(r.completion_tokens for r in res)
    return {"tokens": tokens, "forced": sum(r.forced_tokens for r in res),
            "drafted": sum(s.jump.drafted for s in seqs if s.jump is not None), "steps": steps,
            "wall_s": round(wall, 4), "tok_s": round(tokens / wall, 2),
            "schema_valid": sum(bool(r.schema_valid) for r in res), "finish": sorted({r.finish_reason for r in res})}, res


def bench(engine, *, batches=(1,), max_tokens: int = 400, repeats: int = 3, progress=None) -> dict:
    ids = engine.encode_prompt(messages=[{"role": "user", "content": PROMPT}]) if engine.chat.has_template \
        else engine.encode_prompt(prompt=PROMPT)
    rows = []
    for name, schema in SCHEMAS.items():
        c = make_constraint(json_schema=schema, any_whitespace=False)
        engine.grammars.compile(c)
        run(engine, ids, c, 1, True, 8)  # warm-up (not timed)
        for b in batches:
            best = {}
            for jump in (False, True):
                if progress:
                    progress(f"{name} batch={b} jump_forward={jump}")
                runs = [run(engine, ids, c, b, jump, max_tokens) for _ in range(repeats)]
                best[jump] = min(runs, key=lambda x: x[0]["wall_s"])
            off, on = best[False], best[True]
            same = sum(a.text == z.text for a, z in zip(off[1], on[1]))
            rows.append({"schema": name, "batch": b, "off": off[0], "on": on[0], "same_text": same,
                         "speedup": round(off[0]["wall_s"] / on[0]["wall_s"], 3)})
    return {"bench": "jump-forward", "model": engine.name, "device": str(engine.device),
            "device_name": torch.cuda.get_device_name(engine.device) if engine.device.type == "cuda"
            else (platform.processor() or platform.machine()),
            "dtype": str(engine.dtype).replace("torch.", ""), "prompt_tokens": len(ids), "max_tokens": max_tokens,
            "repeats": repeats, "timing": "best of repeats", "results": rows}


def print_table(res: dict) -> None:
    t = Table(title=f"bench jump-forward: {res['model']} on {res['device_name']} ({res['dtype']}), greedy, "
                    f"best of {res['repeats']}")
    for col in ("schema", "batch", "tokens", "forced/drafted", "steps off→on", "wall s off→on", "tok/s off→on",
                "speed-up", "same text", "valid off/on"):
        t.add_column(col, justify="left" if col == "schema" else "right")
    for r in res["results"]:
        off, on = r["off"], r["on"]
        t.add_row(r["schema"], str(r["batch"]), f"{off['tokens']}→{on['tokens']}", f"{on['forced']}/{on['drafted']}",
                  f"{off['steps']}→{on['steps']}", f"{off['wall_s']:.2f}→{on['wall_s']:.2f}",
                  f"{off['tok_s']:.1f}→{on['tok_s']:.1f}", f"{r['speedup']:.2f}x", f"{r['same_text']}/{r['batch']}",
                  f"{off['schema_valid']}/{on['schema_valid']}")
    Console(stderr=True, width=150).print(t)
