"""Synthetic decision contexts of a chosen length (benchmarks, scale-out and profiling scripts)."""

from __future__ import annotations

import random
import re

from ..decide import presets


def contexts(engine, n: int, tokens: int = 400, seed: int = 0) -> list[str]:
    """``n`` distinct contexts of about ``tokens`` tokens: seeded draws of the bundled presets' sentences."""
    pool = [s for name in presets.names() for e in presets.load(name)["examples"]
            for s in re.split(r"(?<=[.!?])\s+", e.replace("\n", " ")) if s.strip()]
    out = []
    for i in range(n):
        rng, text = random.Random(seed * 100_003 + i), f"Ticket {i}."
        while len(engine.tokenizer.encode(text)) < tokens:
            text += " " + rng.choice(pool)
        out.append(text)
    return out
