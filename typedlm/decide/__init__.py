"""Parallel typed decisions: schema -> one prefill -> every candidate scored in batched passes.

Layout: the run-time path at the top (``schema`` -> ``plan`` -> ``prompt`` -> ``scoring`` / ``passes`` ->
``prior`` + ``ties`` -> ``constraints/`` -> ``result``; ``api`` runs it), ``constraints/`` (parse, solve, joint)
and ``calibrate/`` (bundle, fit, collect). The names below load on first use (PEP 562), so importing a light
module of the package (``presets``, ``schema``) does not pull in torch through :mod:`typedlm.decide.api`."""

import importlib

_WHERE = {
    "api": ("decide", "decide_many", "plan_for", "prepare", "run"),
    "naive": ("naive_generate", "naive_json_schema"),
    "options": ("DecideOptions", "OptionsError"),
    "plan": ("DEFAULT_SCORING", "NONE_OF_ABOVE", "SCORING_MODES", "Plan", "compile_plan", "get_plan"),
    "result": ("TOLERANCE", "Decision", "FieldResult"),
    "schema": ("Choice", "DecisionSchema", "Field", "SchemaError", "lint"),
}
_MODULE = {name: mod for mod, names in _WHERE.items() for name in names}
__all__ = sorted(_MODULE)


def __getattr__(name: str):
    if name not in _MODULE:
        raise AttributeError(f"module 'typedlm.decide' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_MODULE[name]}", __name__), name)
    globals()[name] = value
    return value
