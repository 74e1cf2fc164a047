"""Bundled presets: a schema plus example contexts, shipped as JSON in ``typedlm/decide/presets/``."""

from __future__ import annotations

import json
from importlib import resources

from .schema import DecisionSchema, SchemaError


def names() -> list[str]:
    root = resources.files("typedlm.decide") / "presets"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load(name: str) -> dict:
    """{"name", "description", "schema": DecisionSchema, "examples": [str]}; unknown name -> SchemaError."""
    if name not in names():
        raise SchemaError(f"no preset {name!r}: choose one of {', '.join(names())}")
    raw = json.loads((resources.files("typedlm.decide") / "presets" / f"{name}.json").read_text(encoding="utf-8"))
    return {"name": raw["name"], "description": raw["description"], "schema": DecisionSchema.from_dict(raw["schema"]),
            "examples": list(raw["examples"])}
