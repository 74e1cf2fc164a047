"""Where a new schema's time to the FIRST MASK goes under the default engine (handoff: the foreground path is
llguidance's; xgrammar only where llguidance declines), stage by stage, per schema of a corpus file
(``bench/maskbench.py --save-corpus``): ``normalize`` (typedlm's normalizer, no automata), ``emit`` (our
llguidance JSON grammar), ``build`` (llguidance's grammar build: ``LLMatcher``), ``mask`` (its first mask),
``fallback`` (a declined schema: normalizer with automata + xgrammar's compile). One worker process, a
schema past --timeout is a timeout row.

    PYTHONPATH=$PWD python bench/scripts/first_mask_profile.py --corpus .corpus/maskbench.json.gz \\
        --shard 0/8 --json /tmp/profile.json [--names dump/index.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import schemastore  # noqa: E402  (the corpus benches' runner)


def profile_one(row: dict, lenient: bool = False) -> dict:
    import llguidance

    from typedlm.errors import GrammarCompileError
    from typedlm.grammar.backends import NotForEngine, load
    from typedlm.grammar.backends.llguidance import llg_tokenizer
    from typedlm.grammar.backends.llguidance_schema import llg_grammar
    from typedlm.grammar.schema import prepare_schema
    from typedlm.grammar.spec import MAX_WHITESPACE

    schema, registry, info = schemastore._STATE["schemas"][row["name"]], schemastore._STATE["registry"], \
        schemastore._STATE["info"]
    out = {"name": row["name"]}
    t = time.perf_counter()
    try:
        core = prepare_schema(schema, registry=registry, deadline=time.monotonic() + 5, automata=False)
        out["normalize"] = time.perf_counter() - t
        t = time.perf_counter()
        grammar = llg_grammar(core, any_whitespace=True, strict=False, max_whitespace=MAX_WHITESPACE)
        out["emit"] = time.perf_counter() - t
        t = time.perf_counter()
        m = llguidance.LLMatcher(llg_tokenizer(info), grammar, log_level=0)
        out["build"] = time.perf_counter() - t
        if m.is_error() or m.get_grammar_warnings():
            raise NotForEngine("llguidance build")
        t = time.perf_counter()
        m.compute_bitmask()
        out["mask"] = time.perf_counter() - t
        if m.is_error():
            raise NotForEngine("llguidance mask")
    except NotForEngine as e:
        out["declined"] = (e.keyword or str(e))[:80]
        t = time.perf_counter()
        try:
            from typedlm.grammar.spec import make_constraint

            c = make_constraint(json_schema=schema, strict=False)
            xg = load("xgrammar", info)
            xg.compile(c, prepare_schema(schema, registry=registry, deadline=time.monotonic() + 5))
        except Exception as e2:  # noqa: BLE001
            out["refused"] = type(e2).__name__
        out["fallback"] = time.perf_counter() - t
    except GrammarCompileError as e:
        out["refused"] = e.keyword or "(schema)"
        out["normalize"] = time.perf_counter() - t
    out["seconds"] = sum(out.get(k, 0.0) for k in ("normalize", "emit", "build", "mask", "fallback"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--shard", default="0/1")
    ap.add_argument("--names", type=Path, default=None, help="only these schemas (a --dump index.json)")
    ap.add_argument("--tokenizer", default="default")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()
    data = json.loads(gzip.decompress(args.corpus.read_bytes()).decode("utf-8"))
    rows = data["rows"]
    if args.names:
        keep = {r["name"] for r in json.loads(args.names.read_text())}
        rows = [r for r in rows if r["name"] in keep]
    i, n = map(int, args.shard.split("/"))
    results = schemastore.run_all(data["schemas"], rows[i::n], args.timeout, job_fn=profile_one,
                                  tokenizer=args.tokenizer)
    stages = ("normalize", "emit", "build", "mask", "fallback")
    slow = sorted(results, key=lambda r: -r["seconds"])[:20]
    summary = {"schemas": len(results), "first_mask_ms": schemastore.quantiles_ms(r["seconds"] for r in results),
               "share_of_all_time": {s: round(sum(r.get(s, 0) for r in results) / max(1e-9, sum(
                   r["seconds"] for r in results)), 3) for s in stages},
               "share_of_slowest_20": {s: round(sum(r.get(s, 0) for r in slow) / max(1e-9, sum(
                   r["seconds"] for r in slow)), 3) for s in stages},
               "declined": schemastore._count(r["declined"] for r in results if "declined" in r)}
    args.json.write_text(json.dumps({"summary": summary, "slowest": slow, "rows": results}, indent=1))
    print(json.dumps(summary, indent=1))
    for r in slow:
        print(r["name"], {k: round(v * 1000, 1) for k, v in r.items() if isinstance(v, float)},
              r.get("declined", ""), r.get("refused", ""))


if __name__ == "__main__":
    main()
