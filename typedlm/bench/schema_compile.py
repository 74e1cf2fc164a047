"""``typedlm bench schema-compile``: where a JSON Schema's compile time goes, per schema of a corpus.

Three stages, timed apart on one core: the normalizer (``prepare_schema``: refusal or core form), our
EBNF text (:func:`typedlm.grammar.schema.ebnf.to_ebnf`, only for core forms that need it) and
xgrammar's compile (its JSON Schema converter and token-mask cache). The corpus: every schema of the
official suite (one draft), or a JSON-lines file of ``{"schema": ...}`` rows. Each compiler is fresh
(xgrammar's own cache off), so no schema gains from another.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Optional

from .jsonschema_suite import DEFAULT_SUITE, load_suite, remotes_registry


def _quantiles(xs: list[float]) -> dict:
    if not xs:
        return {}
    xs = sorted(xs)
    pick = (lambda q: xs[min(len(xs) - 1, int(q * len(xs)))])
    return {"p50_ms": round(1000 * pick(0.5), 2), "p90_ms": round(1000 * pick(0.9), 2),
            "p99_ms": round(1000 * pick(0.99), 2), "max_ms": round(1000 * xs[-1], 2),
            "mean_ms": round(1000 * statistics.fmean(xs), 2)}


def split_times(schemas: list, registry=None) -> dict:
    """Per-stage quantiles over ``schemas`` (refused ones timed for the normalizer only) and the
    slowest five with their split."""
    import xgrammar as xgr

    from ..errors import GrammarCompileError
    from ..grammar.schema import prepare_schema
    from ..grammar.schema.ebnf import needs_grammar, to_ebnf
    from ..grammar.spec import MAX_WHITESPACE, canonical_json
    from ..testing import default_tokenizer

    tok = default_tokenizer()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok), stop_token_ids=[tok.eos_token_id])
    rows, refused = [], 0
    for schema in schemas:
        t0 = time.perf_counter()
        try:
            core = prepare_schema(schema, registry=registry)
        except GrammarCompileError:
            refused += 1
            rows.append({"normalize": time.perf_counter() - t0})
            continue
        t1 = time.perf_counter()
        ebnf = to_ebnf(core, any_whitespace=True, strict=False, max_whitespace=MAX_WHITESPACE) \
            if needs_grammar(core) else None
        t2 = time.perf_counter()
        compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        try:
            if ebnf is not None:
                compiler.compile_grammar(ebnf)
            else:
                compiler.compile_json_schema(canonical_json(core), any_whitespace=True, strict_mode=False,
                                             max_whitespace_cnt=MAX_WHITESPACE)
        except Exception:  # noqa: BLE001 - counted, not fatal: a bench row
            refused += 1
            continue
        t3 = time.perf_counter()
        rows.append({"normalize": t1 - t0, "ebnf": t2 - t1, "xgrammar": t3 - t2, "total": t3 - t0,
                     "schema": canonical_json(schema)[:120]})
    done = [r for r in rows if "total" in r]
    return {"schemas": len(schemas), "compiled": len(done), "refused": refused,
            "normalize": _quantiles([r["normalize"] for r in rows]),
            "ebnf": _quantiles([r["ebnf"] for r in done if r["ebnf"] > 0]),
            "xgrammar": _quantiles([r["xgrammar"] for r in done]),
            "total": _quantiles([r["total"] for r in done]),
            "share_xgrammar": round(sum(r["xgrammar"] for r in done) / max(1e-9, sum(r["total"] for r in done)), 3),
            "slowest": [{k: (round(1000 * v, 1) if isinstance(v, float) else v) for k, v in r.items()}
                        for r in sorted(done, key=lambda r: -r["total"])[:5]]}


def register(app, bench_app) -> None:
    import typer

    from ..cliutil import print_json, user_errors

    @bench_app.command("schema-compile")
    def schema_compile(
        draft: str = typer.Option("draft2020-12", "--draft", help="the suite draft whose schemas are timed"),
        corpus: Optional[Path] = typer.Option(None, "--corpus", help='JSON lines of {"schema": ...} instead'),
        out: Optional[Path] = typer.Option(None, "--json", help="write the result here"),
    ):
        """Time the normalizer, our EBNF and xgrammar's compile apart, per schema; quantiles + slowest."""
        with user_errors():
            if corpus is not None:
                schemas = [json.loads(line)["schema"] for line in Path(corpus).read_text().splitlines() if line]
                registry = None
            else:
                schemas = [c.schema for c in load_suite(DEFAULT_SUITE, draft)]
                registry = remotes_registry(DEFAULT_SUITE, draft)
            result = split_times(schemas, registry)
            if out is not None:
                Path(out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print_json(result)
