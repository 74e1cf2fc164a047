"""``typedlm bench schema-compile``: where a JSON Schema's compile time goes, per schema of a corpus.

Stages, timed apart on one core: the normalizer (``prepare_schema``: refusal or core form), our
EBNF text (:func:`typedlm.grammar.schema.ebnf.to_ebnf`, only for core forms that need it) and
xgrammar's compile (its JSON Schema converter and token-mask cache); beside them the second engine,
llguidance (:mod:`typedlm.grammar.backends.llguidance`: its grammar and matcher, and its first mask). The corpus: every schema of the
official suite (one draft), or a JSON-lines file of ``{"schema": ...}`` rows. Each compiler is fresh
(xgrammar's own cache off), so no schema gains from another.
"""

from __future__ import annotations

import gc
import statistics
import time

import xgrammar as xgr

from ..errors import GrammarCompileError
from ..grammar.compiler import Grammars
from ..grammar.backends import NotForEngine, load
from ..grammar.schema import prepare_schema
from ..grammar.schema.ebnf import to_ebnf
from ..grammar.schema.ir import needs_grammar
from ..grammar.spec import MAX_WHITESPACE, canonical_json, make_constraint
from ..testing import default_tokenizer


def _quantiles(xs: list[float]) -> dict:
    if not xs:
        return {}
    xs = sorted(xs)
    pick = (lambda q: xs[min(len(xs) - 1, int(q * len(xs)))])
    return {"p50_ms": round(1000 * pick(0.5), 2), "p90_ms": round(1000 * pick(0.9), 2),
            "p99_ms": round(1000 * pick(0.99), 2), "max_ms": round(1000 * xs[-1], 2),
            "mean_ms": round(1000 * statistics.fmean(xs), 2)}


def split_one(schema, info, registry=None, deadline_s: float = 60.0) -> dict:
    """One schema's stages, in seconds: ``normalize``; then, for a core form, ``ebnf`` (our EBNF text, only
    where it is needed) and ``xgrammar`` (its compile), and ``llguidance`` (grammar text + matcher build;
    ``llguidance_refused``: why it did not take the core form; its first mask, computed lazily, is part of
    the build); ``refused``: the normalizer's or xgrammar's refusal."""
    row: dict = {"schema": canonical_json(schema)[:120]}
    t0 = time.perf_counter()
    try:
        core = prepare_schema(schema, registry=registry, deadline=time.monotonic() + deadline_s)
    except GrammarCompileError as e:
        return {**row, "normalize": time.perf_counter() - t0, "refused": e.keyword or "(schema)"}
    t1 = time.perf_counter()
    row["normalize"] = t1 - t0
    llguidance = load("llguidance", info)
    t2 = time.perf_counter()
    try:
        llguidance.compile(make_constraint(json_schema=schema, strict=False), core)
        row["llguidance"] = time.perf_counter() - t2
    except GrammarCompileError as e:
        row["llguidance_refused"] = (e.keyword or str(e))[:80]
    t4 = time.perf_counter()
    ebnf = to_ebnf(core, any_whitespace=True, strict=False, max_whitespace=MAX_WHITESPACE) \
        if needs_grammar(core) else None
    t5 = time.perf_counter()
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    try:
        if ebnf is not None:
            compiler.compile_grammar(ebnf)
        else:
            compiler.compile_json_schema(canonical_json(core), any_whitespace=True, strict_mode=False,
                                         max_whitespace_cnt=MAX_WHITESPACE)
    except Exception:  # noqa: BLE001 - counted, not fatal: a bench row
        return {**row, "refused": "xgrammar"}
    row.update(ebnf=t5 - t4, xgrammar=time.perf_counter() - t5)
    return row


def auto_phases(schema, info, registry=None, deadline_s: float = 60.0) -> dict:
    """One schema compiled as a server compiles it (``Grammars`` with ``engine="auto"``, ``strict=False``,
    any whitespace, not lenient), each phase timed on that same path: ``normalize_llg`` (the core form
    for llguidance), ``llguidance`` (its grammar + matcher) or ``llguidance_declined`` (why not),
    ``normalize_xgrammar`` (the core form with automata, on the fallback), ``xgrammar`` (its compile),
    ``total``; ``gc``: Python's garbage collector within them; ``refused``: the keyword of a refusal."""
    row: dict = {}

    def timed(name, fn, *args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            row[name] = row.get(name, 0.0) + time.perf_counter() - t

    class Timed(Grammars):
        def _core_schema(self, c, deadline, automata=True):
            return timed("normalize_xgrammar" if automata else "normalize_llg", super()._core_schema,
                         c, deadline, automata)

    class TimedBackend:
        def __init__(self, inner):
            self.inner, self.name, self.kinds, self.automata = inner, inner.name, inner.kinds, inner.automata

        def compile(self, c, source):
            try:
                return timed(self.name, self.inner.compile, c, source)
            except NotForEngine as e:
                row[f"{self.name}_declined"] = (e.keyword or str(e))[:100]
                raise

    grammars = Timed(info, schema_registry=registry, engine="auto", timeout_s=deadline_s)
    grammars._backend("xgrammar").compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    grammars._backends = {name: TimedBackend(b) for name, b in grammars._backends.items()}
    collecting: list[float] = []

    def gc_timer(phase, _info):  # Python's collector, inside the phases above: the process's heap, not the schema
        if phase == "start":
            collecting.append(time.perf_counter())
        elif collecting:
            row["gc"] = row.get("gc", 0.0) + time.perf_counter() - collecting.pop()

    gc.callbacks.append(gc_timer)
    t0 = time.perf_counter()
    try:
        grammars._build(make_constraint(json_schema=schema, strict=False), time.monotonic() + deadline_s)
    except GrammarCompileError as e:
        row["refused"] = e.keyword or "(schema)"
    except Exception as e:  # noqa: BLE001 - xgrammar's own refusal: a row
        row["refused"] = f"xgrammar: {type(e).__name__}"
    finally:
        gc.callbacks.remove(gc_timer)
    row["total"] = time.perf_counter() - t0
    return row


def phases_summary(rows: list[dict], top: int = 20) -> dict:
    """Quantiles of the total (compiled and refused apart), where the time of the ``top`` slowest went,
    and how much of all time each phase took."""
    phases = ("normalize_llg", "llguidance", "normalize_xgrammar", "xgrammar", "gc")
    done = [r for r in rows if "refused" not in r]
    slow = sorted(rows, key=lambda r: -r["total"])[:top]
    return {"schemas": len(rows), "compiled": len(done),
            "compiled_total": _quantiles([r["total"] for r in done]),
            "refused_total": _quantiles([r["total"] for r in rows if "refused" in r]),
            "all_total": _quantiles([r["total"] for r in rows]),
            "over_100ms": sum(r["total"] > 0.1 for r in rows), "over_2s": sum(r["total"] > 2 for r in rows),
            "xgrammar_fallbacks": sum("xgrammar" in r for r in rows),
            "llguidance_declined": _counts(r.get("llguidance_declined") for r in rows),
            "share": {p: round(sum(r.get(p, 0) for r in rows) / max(1e-9, sum(r["total"] for r in rows)), 3)
                      for p in phases},
            "slowest": [{k: (round(1000 * v, 1) if isinstance(v, float) else v) for k, v in r.items()} for r in slow]}


def split_summary(rows: list[dict]) -> dict:
    """Per-stage quantiles (refused rows timed for the normalizer only), the totals per engine (``auto``:
    llguidance where it took the core form, else xgrammar) and the slowest five."""
    done = [r for r in rows if "xgrammar" in r]
    for r in done:
        r["total_xgrammar"] = r["normalize"] + r["ebnf"] + r["xgrammar"]
        r["total_auto"] = r["normalize"] + r["llguidance"] if "llguidance" in r else r["total_xgrammar"]
    llg = [r for r in rows if "llguidance" in r]
    return {"schemas": len(rows), "compiled": len(done), "refused": len(rows) - len(done),
            "llguidance_took": len(llg), "llguidance_refused": _counts(r.get("llguidance_refused") for r in done),
            "normalize": _quantiles([r["normalize"] for r in rows]),
            "ebnf": _quantiles([r["ebnf"] for r in done if r["ebnf"] > 0]),
            "xgrammar": _quantiles([r["xgrammar"] for r in done]),
            "llguidance": _quantiles([r["llguidance"] for r in llg]),
            "total_xgrammar": _quantiles([r["total_xgrammar"] for r in done]),
            "total_auto": _quantiles([r["total_auto"] for r in done]),
            "share_normalize": round(sum(r["normalize"] for r in done) / max(1e-9, sum(r["total_xgrammar"] for r in done)), 3),
            "slowest": [{k: (round(1000 * v, 1) if isinstance(v, float) else v) for k, v in r.items()}
                        for r in sorted(done, key=lambda r: -r["total_xgrammar"])[:5]]}


def _counts(xs) -> dict:
    out: dict = {}
    for x in xs:
        if x is not None:
            out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def split_times(schemas: list, registry=None) -> dict:
    """:func:`split_one` over ``schemas`` (one process, the default model's tokenizer), summarized."""
    tok = default_tokenizer()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok), stop_token_ids=[tok.eos_token_id])
    return split_summary([split_one(s, info, registry) for s in schemas])
