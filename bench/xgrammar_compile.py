"""xgrammar per schema on a stride of MaskBench: EBNF size versus compile time (what the grammar size cap,
``Settings.max_grammar_bytes``, is chosen from) and a cold compile versus a hit of the disk cache.

Each schema goes through the compiler's path for xgrammar (``strict=False``, any whitespace, the default
model's tokenizer): the core form, its grammar text (our EBNF or xgrammar's own conversion), then in one
worker process (a compile past ``--limit`` seconds is abandoned and its process replaced): xgrammar's compile
of that grammar (its own cache off), the entry written to a :class:`DiskCache`, and that entry read back
(read + ``deserialize_json``) as a fresh process would. Usage::

    nice -n 10 python bench/xgrammar_compile.py --repo /work/.mirror/guidance-ai+jsonschemabench/repo \\
        --stride 40 --json bench/results/xgrammar-compile-cpu.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # noqa: E402  the corpus reader

_STATE: dict = {}


def _init() -> None:
    import xgrammar as xgr

    from typedlm.testing import default_tokenizer

    from typedlm.grammar.backends.disk_cache import DiskCache, fingerprint

    tok = default_tokenizer()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok), stop_token_ids=[tok.eos_token_id])
    _STATE["info"], _STATE["compiler"] = info, xgr.GrammarCompiler(info, cache_enabled=False)
    _STATE["disk"] = DiskCache(Path(tempfile.mkdtemp(prefix="typedlm-bench-")), 1 << 34, fingerprint(info))


def grammar_text(schema) -> str | None:
    """The grammar xgrammar would compile for ``schema`` (None: refused before xgrammar)."""
    from typedlm.errors import GrammarCompileError
    from typedlm.grammar.backends.xgrammar import json_grammar
    from typedlm.grammar.schema import prepare_schema
    from typedlm.grammar.spec import make_constraint

    c = make_constraint(json_schema=schema, strict=False)
    try:
        core = prepare_schema(schema, deadline=time.monotonic() + 5.0)
        return str(json_grammar(c, core))
    except (GrammarCompileError, RuntimeError, ValueError):
        return None


def _ready() -> bool:
    return "compiler" in _STATE


def _pool():
    """One worker process, its tokenizer loaded (not counted in the first compile's limit)."""
    pool = mp.get_context("spawn").Pool(1, initializer=_init)
    pool.apply(_ready)
    return pool


def _compile(text: str) -> dict:
    """Seconds of a cold compile, of writing the disk entry, and of a disk hit (read + deserialize)."""
    import xgrammar as xgr

    disk = _STATE["disk"]
    t0 = time.perf_counter()
    compiled = _STATE["compiler"].compile_grammar(text)
    t1 = time.perf_counter()
    disk.put(text, compiled.serialize_json())
    t2 = time.perf_counter()
    hit = disk.get(text, lambda data: xgr.CompiledGrammar.deserialize_json(data, _STATE["info"]))
    t3 = time.perf_counter()
    assert hit is not None
    return {"seconds": round(t1 - t0, 4), "write_s": round(t2 - t1, 4), "disk_hit_s": round(t3 - t2, 4),
            "entry_bytes": disk.path(text).stat().st_size}


def _pct(xs: list[float], q: float) -> float | None:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4) if xs else None


def summary(rows: list[dict]) -> dict:
    """Cold compile vs disk hit (seconds, percentiles), and compile time by EBNF size band."""
    done = [r for r in rows if r.get("seconds") is not None]
    out = {"schemas": len(rows), "timeouts": sum(1 for r in rows if "seconds" in r and r["seconds"] is None)}
    for key in ("seconds", "disk_hit_s"):
        xs = [r[key] for r in done]
        out[key] = {"p50": _pct(xs, 0.5), "p90": _pct(xs, 0.9), "p99": _pct(xs, 0.99), "max": max(xs, default=None)}
    bands = [0, 10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000, 10**12]
    out["by_bytes"] = []
    for lo, hi in zip(bands, bands[1:]):
        rs = [r for r in rows if lo <= r["bytes"] < hi and "error" not in r]
        if rs:
            xs = [r["seconds"] if r["seconds"] is not None else float("inf") for r in rs]
            out["by_bytes"].append({"bytes": [lo, hi], "schemas": len(rs), "p50_s": _pct(xs, 0.5),
                                    "max_s": max(xs), "over_2s": sum(x > 2 for x in xs)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--stride", type=int, default=40)
    ap.add_argument("--limit", type=float, default=15.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    schemas, rows = maskbench.extract(args.repo, args.stride)
    pool = _pool()
    out = []
    for row in rows:
        text = grammar_text(schemas[row["name"]])
        if text is None:
            continue
        rec = {"name": row["name"], "bytes": len(text.encode()), "rules": text.count("::=")}
        try:
            rec.update(pool.apply_async(_compile, (text,)).get(timeout=args.limit))
        except mp.TimeoutError:
            rec["seconds"] = None  # past the limit
            pool.terminate()
            pool = _pool()
        except Exception as e:  # noqa: BLE001 - xgrammar's refusal: a row
            rec["error"] = type(e).__name__
        out.append(rec)
        print(json.dumps(rec), flush=True)
    pool.terminate()
    result = {"command": " ".join(["python"] + sys.argv), "machine": f"{platform.machine()} {os.cpu_count()} cores "
              f"(shared, nice 10; load average at the end {os.getloadavg()[0]:.1f})", "stride": args.stride, "summary": summary(out), "rows": out}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
