"""`typedlm bench grammar`: per-token mask-fill time walking real JSON outputs, and compile time
cold vs cached, on the default tokenizer (49k) and a Qwen2.5 vocabulary (151k, padded lm_head 152,064).

Only tokenizers are needed (no model weights): the grammar layer's cost is independent of the model.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import statistics
import time

from rich.console import Console
from rich.table import Table
import xgrammar as xgr

from ..grammar.compiler import Grammars
from ..grammar.controller import GrammarRow
from ..grammar.spec import make_constraint
from ..testing import default_tokenizer
from ..testing.archs import qwen_tokenizer


# Realistic schemas with a valid instance each (property order = schema order, as the grammar emits).
CASES = [
    ("person", {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                       "email": {"type": "string", "format": "email"},
                       "languages": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
                       "employed": {"type": "boolean"}},
        "required": ["name", "age", "email", "languages", "employed"], "additionalProperties": False,
    }, {"name": "Maria Gonzalez", "age": 34, "email": "maria.gonzalez@example.com",
        "languages": ["Spanish", "English", "Portuguese"], "employed": True}),
    ("invoice", {
        "type": "object",
        "properties": {
            "invoice_id": {"type": "string", "pattern": "^INV-[0-9]{6}$"},
            "currency": {"enum": ["EUR", "USD", "GBP", "JPY"]},
            "lines": {"type": "array", "minItems": 1, "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1},
                               "unit_price": {"type": "number", "minimum": 0}},
                "required": ["sku", "qty", "unit_price"], "additionalProperties": False}},
            "paid": {"type": "boolean"}, "notes": {"type": ["string", "null"]}},
        "required": ["invoice_id", "currency", "lines", "paid", "notes"], "additionalProperties": False,
    }, {"invoice_id": "INV-004217", "currency": "EUR",
        "lines": [{"sku": "A-100", "qty": 2, "unit_price": 19.99}, {"sku": "B-7", "qty": 1, "unit_price": 250.0},
                  {"sku": "C-33", "qty": 12, "unit_price": 0.5}], "paid": False,
        "notes": "Deliver to the back entrance, ask for Jonas."}),
    ("triage", {
        "type": "object",
        "properties": {
            "category": {"enum": ["billing", "bug", "feature_request", "account", "other"]},
            "priority": {"enum": ["low", "medium", "high", "urgent"]},
            "sentiment": {"enum": ["negative", "neutral", "positive"]},
            "needs_human": {"type": "boolean"},
            "tags": {"type": "array", "items": {"enum": ["refund", "login", "crash", "ui", "api", "pricing"]},
                     "maxItems": 6},
            "summary": {"type": "string", "maxLength": 200}},
        "required": ["category", "priority", "sentiment", "needs_human", "tags", "summary"],
        "additionalProperties": False,
    }, {"category": "bug", "priority": "high", "sentiment": "negative", "needs_human": True,
        "tags": ["crash", "api"], "summary": "The export endpoint returns 500 for every CSV over 10 MB since Monday."}),
]


def _tokenizers(which: str):
    out = []
    if which in ("default", "both"):
        tok = default_tokenizer()
        out.append(("smollm2-49k", tok, len(tok)))
    if which in ("qwen2.5", "both"):
        tok = qwen_tokenizer()
        out.append(("qwen2.5-151k", tok, 152064))
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def bench_tokenizer(name: str, tok, model_vocab: int, *, repeats: int = 5, engine: str = "xgrammar") -> dict:
    stop = [tok.eos_token_id]
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=model_vocab, stop_token_ids=stop)
    Grammars(info, engine=engine)  # llguidance: its tokenizer is built once per vocabulary, before any timing
    fill_us: list[float] = []
    cold_ms: list[float] = []
    hit_us: list[float] = []
    per_case = {}
    for case, schema, instance in CASES:
        constraint = make_constraint(json_schema=schema)
        # compile cold: a fresh compiler (no xgrammar cache, no typedlm cache) each time
        for _ in range(repeats):
            g = Grammars(info, engine=engine)
            t0 = time.perf_counter()
            compiled, _ = g.compile(constraint)
            cold_ms.append((time.perf_counter() - t0) * 1e3)
        for _ in range(repeats * 20):
            t0 = time.perf_counter()
            g.compile(make_constraint(json_schema=schema))  # same schema, new Constraint object
            hit_us.append((time.perf_counter() - t0) * 1e6)
        text = json.dumps(instance, indent=2, ensure_ascii=False)
        ids = tok.encode(text, add_special_tokens=False)
        case_fill = []
        for _ in range(repeats):
            row = GrammarRow(compiled, vocab_size=model_vocab, stop_ids=frozenset(stop))
            for t in ids:
                t0 = time.perf_counter_ns()
                row.fill()
                case_fill.append((time.perf_counter_ns() - t0) / 1e3)
                if not row.accept(t):
                    raise RuntimeError(f"{case}: grammar rejected token {t} of the sample instance on {name}")
            row.fill()
            if not row.accept(stop[0]):
                raise RuntimeError(f"{case}: grammar did not accept EOS after the full instance on {name}")
        fill_us += case_fill
        per_case[case] = {"tokens": len(ids), "fill_p50_us": statistics.median(case_fill)}
    return {
        "tokenizer": name, "vocab": len(tok), "model_vocab": model_vocab,
        "mask_fill_us": {"p50": statistics.median(fill_us), "p99": _pct(fill_us, 0.99), "max": max(fill_us),
                         "n": len(fill_us)},
        "compile_cold_ms": {"p50": statistics.median(cold_ms), "max": max(cold_ms), "n": len(cold_ms)},
        "compile_cached_us": {"p50": statistics.median(hit_us), "p99": _pct(hit_us, 0.99), "n": len(hit_us)},
        "per_case": per_case,
    }


TARGETS = {"mask_p50_us": 50.0, "mask_p99_us": 500.0, "cache_hit_us": 50.0}


def run(which: str = "both", repeats: int = 5, engine: str = "xgrammar") -> dict:
    rows = [bench_tokenizer(n, t, v, repeats=repeats, engine=engine) for n, t, v in _tokenizers(which)]
    versions = {p: importlib.metadata.version(p) for p in ("xgrammar", "llguidance")[:1 + (engine != "xgrammar")]}
    return {"bench": "grammar", "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "engine": engine, **versions, "targets": TARGETS, "results": rows}


def print_table(res: dict) -> None:
    t = Table(title=f"typedlm bench grammar ({res['engine']})")
    for col in ("tokenizer", "mask p50 µs", "mask p99 µs", "mask max µs", "compile cold p50 ms",
                "cache hit p50 µs"):
        t.add_column(col, justify="right")
    for r in res["results"]:
        m, c, h = r["mask_fill_us"], r["compile_cold_ms"], r["compile_cached_us"]
        t.add_row(r["tokenizer"], f"{m['p50']:.1f}", f"{m['p99']:.1f}", f"{m['max']:.1f}", f"{c['p50']:.2f}",
                  f"{h['p50']:.1f}")
    Console(stderr=True, width=140).print(t)
