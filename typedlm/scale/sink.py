"""Where a corpus job's rows go; the driver alone writes, so each id is written once.

- ``OUT.jsonl`` (any name not ending in ``.parquet``): the ``typedlm decide --output`` lines, appended and fsynced
  per batch. ``OUT.parquet``: a folder of ``part-NNNNNN.parquet`` files (columns ``key`` = the id as JSON text,
  ``record`` = the same line), each written to a temporary name and renamed, so a part is whole or absent.
- Rows that could not be decided: ``<OUT stem>.errors.jsonl`` beside the output (not inside a Parquet folder:
  readers take every file there for a part), ``{"key", "id", "error"}`` per line.

Resume (after a crashed driver, or a stopped job): run the same command with ``resume=True`` / ``--resume``. The
ids already in the output or the errors file are read back (a torn last line is cut off first) and skipped, so
every id ends up exactly once across runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .cluster import ScaleError


def open_sink(output, resume: bool):
    path = Path(output)
    sink = ParquetSink(path) if path.suffix == ".parquet" else JsonlSink(path)
    if sink.exists() and not resume:
        raise ScaleError(f"output '{path}' exists: give --resume (resume=True) to continue it, or remove it")
    sink.open()
    return sink


class _Lines:
    """An append-only JSONL file, fsynced per write; a torn last line is cut off when opened."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        whole = data[:data.rfind(b"\n") + 1]
        if len(whole) != len(data):
            with open(self.path, "r+b") as fh:
                fh.truncate(len(whole))
        return [json.loads(line) for line in whole.decode("utf-8").splitlines() if line.strip()]

    def append(self, lines: list[str]) -> None:
        if not lines:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())


class _Sink:
    def __init__(self, path: Path):
        self.path = path
        self.errors = _Lines(path.with_name(path.stem + ".errors.jsonl"))

    def exists(self) -> bool:
        return self.path.exists() or self.errors.path.exists()

    def open(self) -> None:
        self.done = {r["key"] for r in self.errors.read()} | self.written_keys()
        self.resumed = len(self.done)
        self.duplicates = 0

    def write(self, keys: list[str], records: list[str], errors: list[str]) -> tuple[int, list[dict]]:
        """Write a batch of actor rows; returns (decided, bad rows) among the rows new to the output."""
        good, bad = [], []
        for k, rec, err in zip(keys, records, errors):
            if k in self.done:
                self.duplicates += 1
                continue
            self.done.add(k)
            if err:
                bad.append({"key": k, "id": None if k.startswith("?") else json.loads(k), "error": err})
            else:
                good.append((k, rec))
        self.write_records(good)
        self.errors.append([json.dumps(b, ensure_ascii=False) for b in bad])
        return len(good), bad


class JsonlSink(_Sink):
    def __init__(self, path: Path):
        super().__init__(path)
        self.lines = _Lines(path)

    def written_keys(self) -> set[str]:
        return {json.dumps(r["id"], ensure_ascii=False) for r in self.lines.read()}

    def write_records(self, good: list[tuple[str, str]]) -> None:
        self.lines.append([rec for _, rec in good])


class ParquetSink(_Sink):
    def parts(self) -> list[Path]:
        return sorted(self.path.glob("part-*.parquet")) if self.path.exists() else []

    def written_keys(self) -> set[str]:
        import pyarrow.parquet as pq  # optional extra: ray

        self.path.mkdir(parents=True, exist_ok=True)
        return {k for p in self.parts() for k in pq.read_table(p, columns=["key"]).column("key").to_pylist()}

    def write_records(self, good: list[tuple[str, str]]) -> None:
        import pyarrow as pa  # optional extra: ray
        import pyarrow.parquet as pq  # optional extra: ray

        if not good:
            return
        parts = self.parts()
        n = int(parts[-1].stem.split("-")[1]) + 1 if parts else 0
        table = pa.table({"key": [k for k, _ in good], "record": [r for _, r in good]})
        tmp = self.path / f".part-{n:06d}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.path / f"part-{n:06d}.parquet")
