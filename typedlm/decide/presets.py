"""Bundled presets: a schema plus example contexts, shipped as JSON in ``typedlm/decide/presets/``."""

from __future__ import annotations

import json
from importlib import resources

from .schema import DecisionSchema, SchemaError


def names() -> list[str]:
    root = resources.files("typedlm.decide") / "presets"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def raw(name: str) -> dict:
    """The preset file as JSON: {"name", "description", "schema": dict, "examples": [str]}; unknown -> SchemaError."""
    if name not in names():
        raise SchemaError(f"no preset {name!r}: choose one of {', '.join(names())}")
    return json.loads((resources.files("typedlm.decide") / "presets" / f"{name}.json").read_text(encoding="utf-8"))


def load(name: str) -> dict:
    """{"name", "description", "schema": DecisionSchema, "examples": [str]}; unknown name -> SchemaError."""
    r = raw(name)
    return {"name": r["name"], "description": r["description"], "schema": DecisionSchema.from_dict(r["schema"]),
            "examples": list(r["examples"])}
