"""``typedlm bench scale``: field decisions/s of a corpus job with 1, 2, ... Ray actors (one engine each).

Steady-state rate: field decisions over the actors' busy span (the first batch started to the last batch finished,
wall clock on the actors: start-up and model load excluded, a late-starting actor counts against the rate); the
rate over the whole wall time, start-up included, is reported beside. (Arrival times at the driver are no
measure: Ray Data hands results over in bursts.) The single-process rate of
``decide_many`` on the same batches (same thread count) is the per-actor ceiling: the projection is
actors × that rate, and what falls short of it is Ray's per-batch overhead plus CPU contention.

CPU (tiny model):  OMP_NUM_THREADS=1 typedlm bench scale --actors 1,2
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from ..decide import presets
from ..decide.api import decide_many
from ..testing import save_tiny, tiny_engine
from ..testing.contexts import contexts as make_contexts
from .cluster import cluster
from .corpus import decide_dataset


def _write_corpus(folder: Path, texts: list[str]) -> Path:
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": i, "context": t}) + "\n" for i, t in enumerate(texts)))
    return path


def single_process_rate(engine, schema, texts: list[str], batch: int) -> float:
    """Field decisions/s of in-process decide_many over the same batches (after one warm-up batch)."""
    decide_many(schema, texts[:batch], engine=engine)
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch):
        decide_many(schema, texts[i:i + batch], engine=engine)
    return len(texts) * len(schema.fields) / (time.perf_counter() - t0)


def ray_rate(schema, corpus: Path, folder: Path, model: str, actors: int, batch: int, threads: int) -> dict:
    t0 = time.perf_counter()
    s = decide_dataset(schema, corpus, folder / f"out-{actors}.jsonl", model=model, device="cpu", replicas=actors,
                       batch_size=batch, threads=threads)
    wall = time.perf_counter() - t0
    decisions = s["decided"] * len(schema.fields)
    return {"actors": actors, "decided": s["decided"], "wall_s": wall, "busy_s": s["busy_s"],
            "field_decisions_per_s": decisions / s["busy_s"], "field_decisions_per_s_wall": decisions / wall}


def run(counts: list[int], *, contexts: int, tokens: int, batch: int, threads: int, preset: str) -> dict:
    """The bench: the single-process rate, then one Ray corpus job per actor count on a local cluster."""
    torch.set_num_threads(threads)
    engine = tiny_engine()
    schema = presets.load(preset)["schema"]
    texts = make_contexts(engine, contexts, tokens)
    result = {"machine": f"{os.cpu_count()}-core {platform.machine()} CPU, load average "
                         f"{os.getloadavg()[0]:.1f} at start", "model": "tiny-random-llama", "preset": preset,
              "fields": len(schema.fields), "contexts": contexts, "tokens": tokens, "batch": batch,
              "threads": threads, "command": "typedlm bench scale --actors " + ",".join(map(str, counts))}
    result["single_process_field_decisions_per_s"] = single_process_rate(engine, schema, texts, batch)
    with tempfile.TemporaryDirectory() as tmp, cluster(num_cpus=max(counts)):
        folder = Path(tmp)
        model = save_tiny(folder / "model", engine)
        corpus = _write_corpus(folder, texts)
        result["runs"] = [ray_rate(schema, corpus, folder, model, n, batch, threads) for n in counts]
    result["load_average_at_end"] = round(os.getloadavg()[0], 1)
    base = result["runs"][0]["field_decisions_per_s"] / counts[0]
    for r in result["runs"]:
        r["speedup_vs_first"] = r["field_decisions_per_s"] / result["runs"][0]["field_decisions_per_s"]
        r["projected_field_decisions_per_s"] = base * r["actors"]
    return result
