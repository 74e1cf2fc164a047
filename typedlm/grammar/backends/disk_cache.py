"""Compiled grammars on disk, across restarts: one file per grammar, LRU-bounded in bytes.

An entry is keyed by the SHA-256 of the tokenizer's fingerprint (its vocabulary, special and stop tokens,
:func:`fingerprint`), the engine's name and version, and the grammar text the engine compiles; its file
holds the engine's own serialization (xgrammar: ``CompiledGrammar.serialize_json``). A hit refreshes the
file's modification time; a write past ``max_bytes`` removes the least recently used files. An entry that
cannot be read or deserialized (corrupt, another engine version) is removed and compiled again, never an
error. Files are written to a temporary name and renamed, so readers see whole files only.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path

SUFFIX = ".grammar.json"
ALIAS = ".alias"  # constraint key -> entry file name (DiskCache.link)


def fingerprint(info) -> str:
    """A digest of an xgrammar ``TokenizerInfo``: vocabulary (in order), type, sizes, stop and special ids."""
    h = hashlib.sha256()
    h.update(info.dump_metadata().encode())
    for token in info.decoded_vocab:
        h.update(len(token).to_bytes(4, "little"))
        h.update(token)
    h.update(json.dumps(list(info.special_token_ids)).encode())
    return h.hexdigest()


class DiskCache:
    """Serialized compiled grammars under ``directory`` (created on first write), at most ``max_bytes``."""

    def __init__(self, directory: Path, max_bytes: int, namespace: str):
        self.directory, self.max_bytes = Path(directory), max_bytes
        self.namespace = namespace  # tokenizer fingerprint + engine name and version
        self._lock = threading.Lock()

    def path(self, text: str) -> Path:
        digest = hashlib.sha256(f"{self.namespace}\0{text}".encode()).hexdigest()
        return self.directory / f"{digest}{SUFFIX}"

    def get(self, text: str, load):
        """``load(data)`` of the entry for grammar ``text``, or None (absent; unreadable or rejected by
        ``load``: removed)."""
        p = self.path(text)
        try:
            data = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        try:
            out = load(data)
        except Exception:  # noqa: BLE001 - corrupt or another version: compiled again and rewritten
            self._remove(p)
            return None
        try:
            os.utime(p)
        except OSError:
            pass
        return out

    def put(self, text: str, data: str) -> None:
        """Store ``data`` for grammar ``text`` and evict past the bound; an unwritable directory is skipped."""
        p = self.path(text)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(data)
            os.replace(tmp, p)
        except OSError:
            return
        self.evict()

    def link(self, name: str, text: str) -> None:
        """Note that constraint ``name`` compiles to grammar ``text`` (a small alias file), so :meth:`linked`
        can tell a hit before the grammar text is built."""
        digest = hashlib.sha256(f"{self.namespace}\0name\0{name}".encode()).hexdigest()
        try:
            (self.directory / f"{digest}{ALIAS}").write_text(self.path(text).name, encoding="utf-8")
        except OSError:
            pass

    def linked(self, name: str) -> bool:
        """An entry is stored for constraint ``name`` (see :meth:`link`)."""
        digest = hashlib.sha256(f"{self.namespace}\0name\0{name}".encode()).hexdigest()
        try:
            target = (self.directory / f"{digest}{ALIAS}").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return False
        return bool(target) and "/" not in target and (self.directory / target).exists()

    def evict(self) -> None:
        """Remove the least recently used entries until the directory holds at most ``max_bytes``."""
        with self._lock:
            entries = []
            for p in self.directory.glob(f"*{SUFFIX}"):
                try:
                    st = p.stat()
                except OSError:
                    continue
                entries.append((st.st_mtime, st.st_size, p))
            total = sum(size for _, size, _ in entries)
            for _, size, p in sorted(entries, key=lambda e: e[0]):
                if total <= self.max_bytes:
                    break
                self._remove(p)
                total -= size

    @staticmethod
    def _remove(p: Path) -> None:
        try:
            p.unlink()
        except OSError:
            pass
