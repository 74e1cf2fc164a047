"""Input rows for a corpus job: JSONL / Parquet / CSV (Ray Data readers) -> rows ``key``, ``context``, ``error``.

``key`` is the row's id as JSON text (ids are strings or integers); it is what the output, retries and resume
match on. A row that cannot be decided (no id, empty context, a context that is not a string, a line that is not
JSON) keeps an ``error`` and is reported, never decided. JSONL lines are parsed here, not by Arrow, so one bad line
cannot fail a whole block."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .cluster import ScaleError

# Reading and parsing are light and must never wait for CPUs the model actors hold (actors taking every logical
# CPU left a 0.25-CPU read task unscheduled forever): no logical CPU, at most READ_TASKS at once.
READ_CPUS = 0
READ_TASKS = 2


def row(cid, text, error: str = "") -> dict:
    if not error and (isinstance(cid, bool) or not isinstance(cid, (str, int))):
        error = f"id must be a string or an integer, got {type(cid).__name__}"
    if not error and not isinstance(text, str):
        error = f"context must be a string, got {type(text).__name__}"
    if not error and not text.strip():
        error = "context is empty"
    key = json.dumps(cid, ensure_ascii=False) if isinstance(cid, (str, int)) and not isinstance(cid, bool) \
        else "?" + hashlib.sha256(repr((cid, text)).encode()).hexdigest()[:16]
    return {"key": key, "context": text if isinstance(text, str) and not error else "", "error": error}


def parse_line(line: str) -> dict:
    """One JSONL line ``{"id": ..., "context": "..."}``."""
    try:
        item = json.loads(line)
    except json.JSONDecodeError as e:
        return row(None, line, f"not valid JSON: {e}")
    if not isinstance(item, dict) or "id" not in item or "context" not in item:
        return row(None, line, "a line must be an object with 'id' and 'context'")
    return row(item["id"], item["context"])


def _rows(batch, parse) -> dict:
    out = [parse(r) for r in batch]
    return {k: [r[k] for r in out] for k in ("key", "context", "error")}


def _jsonl_batch(batch: dict, skip: frozenset) -> dict:
    return _drop(_rows(list(batch["text"]), parse_line), skip)


def _table_batch(batch: dict, skip: frozenset) -> dict:
    items = [(_plain(i), _plain(c)) for i, c in zip(batch["id"], batch["context"])]
    return _drop(_rows(items, lambda ic: row(*ic)), skip)


def _plain(v):
    """A numpy scalar as its Python value (ids read from Parquet / CSV)."""
    return v.item() if hasattr(v, "item") else v


def _drop(rows: dict, skip: frozenset) -> dict:
    keep = [i for i, k in enumerate(rows["key"]) if k not in skip]
    return {k: [v[i] for i in keep] for k, v in rows.items()}


def load_rows(ray, data, skip: frozenset = frozenset()):
    """A Dataset of ``key, context, error`` rows from a path (``.jsonl``/``.json``, ``.parquet``, ``.csv``, or a
    folder of one kind) or from a Ray Dataset with ``id`` and ``context`` columns; rows whose key is in ``skip``
    (already written) are left out."""
    if not isinstance(data, (str, Path)):
        ds, parse = data, _table_batch
    else:
        ds, parse = _read(ray, Path(data))
    if parse is _table_batch:
        missing = {"id", "context"} - set(ds.schema().names)
        if missing:
            raise ScaleError(f"the input needs columns 'id' and 'context'; missing {sorted(missing)} "
                             f"(ids are how the output, retries and resume match rows)")
    return ds.map_batches(parse, fn_kwargs={"skip": skip}, batch_format="numpy", num_cpus=READ_CPUS,
                          compute=ray.data.TaskPoolStrategy(size=READ_TASKS))


def _read(ray, path: Path):
    kind = _kind(path)
    if kind == "jsonl":
        return ray.data.read_text(str(path), num_cpus=READ_CPUS, concurrency=READ_TASKS), _jsonl_batch
    if kind == "parquet":
        return ray.data.read_parquet(str(path), num_cpus=READ_CPUS, concurrency=READ_TASKS), _table_batch
    import pyarrow as pa  # optional extra: ray
    import pyarrow.csv as pcsv  # optional extra: ray

    text = pcsv.ConvertOptions(column_types={"context": pa.string()}, strings_can_be_null=False)
    return (ray.data.read_csv(str(path), convert_options=text, num_cpus=READ_CPUS, concurrency=READ_TASKS),
            _table_batch)


def _kind(path: Path) -> str:
    if not path.exists():
        raise ScaleError(f"input '{path}' does not exist")
    names = [p.name for p in path.iterdir() if p.is_file()] if path.is_dir() else [path.name]
    kinds = {("jsonl" if n.endswith((".jsonl", ".json")) else "parquet" if n.endswith(".parquet")
              else "csv" if n.endswith(".csv") else None) for n in names}
    kinds.discard(None)
    if len(kinds) != 1:
        raise ScaleError(f"input '{path}': give .jsonl, .parquet or .csv files (one kind), found {sorted(names)[:5]}")
    return kinds.pop()
