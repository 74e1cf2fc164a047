"""What an eval run records about itself: the exact weights (sha256), versions and git revision, the prompts."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from ..decide.plan import compile_plan
from ..decide.prompt import prompt_hash
from ..decide.schema import DecisionSchema
from .tracks import OPENAI_PROMPT_VERSION, naive_prompt


def model_sha256(engine) -> str:
    """sha256 over the model's parameters (names, shapes, dtypes, bytes): the exact weights evaluated."""
    h = hashlib.sha256()
    for name, shape, dtype, data in _parameters(engine):
        h.update(f"{name}:{shape}:{dtype}".encode())
        h.update(data)
    return h.hexdigest()


def _parameters(engine):
    """(name, shape, dtype, raw bytes) of every parameter, sorted by name, on either backend."""
    if engine.backend == "mlx":
        import mlx.core as mx  # optional extra: typedlm[mlx]
        from mlx.utils import tree_flatten  # optional extra: typedlm[mlx]

        for name, p in sorted(tree_flatten(engine.model.parameters())):
            yield name, tuple(p.shape), str(p.dtype), np.array(p.reshape(-1).view(mx.uint8)).tobytes()
        return
    for name, t in sorted(engine.model.state_dict().items()):
        yield name, tuple(t.shape), t.dtype, t.detach().cpu().contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes()


def provenance() -> dict:
    """Package versions, the git revision of this checkout (``+dirty`` when changed), machine, command."""
    def ver(p):
        try:
            return md.version(p)
        except md.PackageNotFoundError:
            return None

    rev = None
    try:
        here = Path(__file__).resolve().parent
        rev = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip() or None
        if rev and subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--", "."], capture_output=True,
                                  text=True, timeout=5).stdout.strip():
            rev += "+dirty"
    except (OSError, subprocess.SubprocessError):
        pass
    return {"typedlm": ver("typedlm"), "torch": ver("torch"), "transformers": ver("transformers"),
            "xgrammar": ver("xgrammar"), "python": platform.python_version(), "git_revision": rev,
            "machine": f"{os.cpu_count()}-core {platform.machine()} {platform.system()}",
            "command": "typedlm " + " ".join(sys.argv[1:])}


def prompt_hashes(tracks, schema_dict: dict, engine) -> dict:
    """sha256 (12 hex) of each track's prompt rendered for the first case's schema with a placeholder context."""
    schema = DecisionSchema.from_dict(schema_dict)
    out = {}
    for t in tracks:
        key = f"{t.name}/{t.mode}"
        if t.name == "parallel":
            out[key] = prompt_hash(compile_plan(engine.tokenizer, schema, t.mode))
            continue
        if t.name == "naive_local":
            text = naive_prompt(schema, "<context>")
        else:
            text = OPENAI_PROMPT_VERSION
        out[key] = hashlib.sha256(text.encode()).hexdigest()[:12]
    return out
