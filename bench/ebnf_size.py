"""EBNF size versus xgrammar's compile time, on a stride of MaskBench: what the grammar size cap
(``Settings.max_grammar_bytes``) is chosen from.

Each schema goes through the compiler's path for xgrammar (``strict=False``, any whitespace, the default
model's tokenizer): the core form, its grammar text (our EBNF or xgrammar's own conversion), then xgrammar's
compile of that grammar, timed in one worker process (one core; a compile past ``--limit`` seconds is
abandoned and its process replaced). Usage::

    nice -n 10 python bench/ebnf_size.py --repo /work/.mirror/guidance-ai+jsonschemabench/repo --stride 40 \\
        --json bench/results/ebnf-size-cpu.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # noqa: E402  the corpus reader

_STATE: dict = {}


def _init() -> None:
    import xgrammar as xgr

    from typedlm.testing import default_tokenizer

    tok = default_tokenizer()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok), stop_token_ids=[tok.eos_token_id])
    _STATE["compiler"] = xgr.GrammarCompiler(info, cache_enabled=False)


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


def _compile(text: str) -> float:
    t0 = time.perf_counter()
    _STATE["compiler"].compile_grammar(text)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--stride", type=int, default=40)
    ap.add_argument("--limit", type=float, default=15.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    schemas, rows = maskbench.extract(args.repo, args.stride)
    pool = mp.get_context("spawn").Pool(1, initializer=_init)
    out = []
    for row in rows:
        text = grammar_text(schemas[row["name"]])
        if text is None:
            continue
        rec = {"name": row["name"], "bytes": len(text.encode()), "rules": text.count("::=")}
        try:
            rec["seconds"] = round(pool.apply_async(_compile, (text,)).get(timeout=args.limit), 4)
        except mp.TimeoutError:
            rec["seconds"] = None  # past the limit
            pool.terminate()
            pool = mp.get_context("spawn").Pool(1, initializer=_init)
        except Exception as e:  # noqa: BLE001 - xgrammar's refusal: a row
            rec["error"] = type(e).__name__
        out.append(rec)
        print(json.dumps(rec), flush=True)
    pool.terminate()
    result = {"command": " ".join(["python"] + sys.argv), "machine": f"{platform.machine()} {os.cpu_count()} cores "
              "(shared, nice 10)", "stride": args.stride, "rows": out}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
