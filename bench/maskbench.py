"""The machine-written corpus: MaskBench's real-world schemas with instances written by a language model.

Reads a snapshot of github.com/guidance-ai/jsonschemabench (a bare git directory, ``fetch
github:guidance-ai/jsonschemabench``): ``maskbench/data/<split>---<name>.json`` holds ``schema`` and
``tests`` (``{"valid", "data"}``: instances Llama 3.1 70B wrote, labelled by jsonschema). Each schema with
tests goes through the same path as the hand-written corpus (:mod:`schemastore`: ``strict=False``, any
whitespace, the default model's tokenizer, compile timed in one worker process, a label counted only
where jsonschema with typedlm's format checker agrees, valid instances with keys in the schema's order).

``--stride k`` takes every k-th schema with tests (sorted by file name), so a loaded machine can run a
reproducible sample; ``--shard I/N`` runs one of N parts (N processes at once) and ``--merge`` joins their
files; ``--save-corpus`` / ``--corpus`` carry the extracted corpus to a machine without the snapshot. The
time measured is to the FIRST MASK under the default engine (:mod:`schemastore`'s ``run_one``). Usage (the
data is not committed; the script and its results are)::

    python bench/maskbench.py --repo /work/.mirror/guidance-ai+jsonschemabench/repo --stride 20 \\
        --json bench/results/maskbench-cpu.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import schemastore  # the same runner and summary as the hand-written corpus

FOLDER = "maskbench/data"


def documents(repo: Path) -> dict[str, object]:
    """Every JSON file under :data:`FOLDER` by path, read through one ``git cat-file --batch``."""
    listing = subprocess.run(["git", "--git-dir", str(repo), "ls-tree", "-r", "HEAD", FOLDER], check=True,
                             capture_output=True, text=True).stdout.splitlines()
    blobs = {line.split("\t", 1)[1]: line.split()[2] for line in listing if line.endswith(".json")}
    out = subprocess.run(["git", "--git-dir", str(repo), "cat-file", "--batch"], check=True, capture_output=True,
                         input="".join(f"{b}\n" for b in blobs.values()).encode()).stdout
    docs, at = {}, 0
    for path in blobs:
        header_end = out.index(b"\n", at)
        header = out[at:header_end].split()
        if len(header) < 3:  # "<id> missing": a large file the snapshot left out
            at = header_end + 1
            continue
        size = int(header[2])
        docs[path] = json.loads(out[header_end + 1:header_end + 1 + size].decode("utf-8-sig"))
        at = header_end + 1 + size + 1
    return docs


def extract(repo: Path, stride: int) -> tuple[dict, list[dict]]:
    """Every ``stride``-th schema with tests: ``{name: schema}`` and rows ``{"name", "split", "valid", "invalid"}``."""
    docs = documents(repo)
    schemas, rows = {}, []
    for path in sorted(docs):
        doc = docs[path]
        tests = doc.get("tests") or []
        if not tests or not isinstance(doc.get("schema"), (dict, bool)):
            continue
        rows.append({"name": Path(path).name, "split": Path(path).name.split("---")[0].split("_")[0],
                     "valid": [t["data"] for t in tests if t.get("valid")],
                     "invalid": [t["data"] for t in tests if not t.get("valid")]})
        schemas[Path(path).name] = doc["schema"]
    rows = rows[::stride]
    return {r["name"]: schemas[r["name"]] for r in rows}, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=None, help="bare git directory of guidance-ai/jsonschemabench")
    ap.add_argument("--json", type=Path, default=None, help="write the summary and per-schema rows here")
    ap.add_argument("--stride", type=int, default=1, help="every k-th schema with tests (1: all)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per schema before it counts as a timeout")
    schemastore.add_engine_options(ap)
    args = ap.parse_args()
    source = "" if args.corpus is not None else (f"guidance-ai/jsonschemabench@{schemastore.head_commit(args.repo)} "
                                                 f"({FOLDER}, every {args.stride}th schema with tests)")
    schemastore.run_corpus(args, lambda: extract(args.repo, args.stride), source,
                           by_split=lambda rows: {r["name"]: r["name"].split("---")[0].split("_")[0] for r in rows})


if __name__ == "__main__":
    main()
