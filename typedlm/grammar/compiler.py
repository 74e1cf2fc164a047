"""Constraint -> compiled grammar: the cache (one per tokenizer, hit/miss counters), the time limit and the
engine choice. Which engine compiled a grammar is known only below :mod:`.backends`."""

from __future__ import annotations

import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import xgrammar as xgr

from ..config import MAX_GRAMMAR_BYTES
from ..errors import GrammarCompileError
from .backends import KINDS, ORDER, Backend, Compiled, NotForEngine, load
from .schema import prepare_lenient, prepare_schema
from .schema.ebnf import to_ebnf
from .schema.ir import needs_grammar
from .spec import ENGINES, MAX_WHITESPACE, Constraint, engine_key
from .unique import GuardedCompiled, has_unique, unique_plan, vocab_of

LLG_MISSING = "the llguidance engine is not installed: pip install 'typedlm[llguidance]'"
DEFAULT_ENGINE = "handoff"
DEFAULT_COMPILE_TIMEOUT_S = 20.0  # MaskBench p99 compile is 4.5 s; a few schemas take > 10 s
DEFAULT_NORMALIZE_S = 5.0  # one normalizer run (per engine tried); past it: a NormalizeTimeLimit refusal


class RelaxedSchemaWarning(UserWarning):
    """A lenient json_schema compiled as a superset: the refused keywords were dropped (listed)."""


class GrammarDisabled(GrammarCompileError):
    """Grammar compilation is switched off for this compiler (``Grammars(enabled=False)``)."""


class GrammarCompileTimeout(GrammarCompileError):
    """A compile ran past the time limit; the caller gets this error and the process goes on."""


def check_engine(engine: str) -> str:
    """``engine`` when it is one of :data:`.spec.ENGINES`; else GrammarCompileError naming the choices."""
    if engine not in ENGINES:
        raise GrammarCompileError(f"grammar engine {engine!r} is not one of {', '.join(ENGINES)}",
                                  keyword="grammar_engine")
    return engine


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    entries: int = 0
    compile_seconds: float = 0.0  # total time spent compiling misses
    timeouts: int = 0  # compiles abandoned at the time limit

    def as_dict(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "entries": self.entries,
                "compile_seconds": round(self.compile_seconds, 6), "timeouts": self.timeouts}


class Grammars:
    """Compiles constraints for one tokenizer. Thread-safe; LRU cache keyed by the constraint key.

    ``engine`` (a constraint's own ``engine`` wins) picks the backends that compile JSON constraints, in
    order (:data:`.backends.ORDER`): ``xgrammar``, ``llguidance`` (a core form it cannot read exactly is a
    :class:`.backends.NotForEngine` error) or ``auto`` (llguidance where it reads the core form exactly,
    else xgrammar); the kinds llguidance does not compile are xgrammar's. ``timeout_s``: the time limit of
    one compile, ``normalize_s`` of one normalizer run within it (past it: a refusal named ``(time limit)``);
    ``threads``: llguidance's mask-fill threads (None: its default); ``enabled=False``: every compile raises
    :class:`GrammarDisabled`. ``max_grammar_bytes``: xgrammar's EBNF size cap (None: none; past it
    :class:`~typedlm.errors.GrammarTooLarge`); ``cache_dir``: where compiled xgrammar grammars persist (None:
    memory only), at most ``cache_bytes``, compiles faster than ``cache_min_s`` left out (None: the backend's
    default)."""

    def __init__(self, tokenizer_info: xgr.TokenizerInfo, *, engine: str = DEFAULT_ENGINE,
                 timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S, normalize_s: float = DEFAULT_NORMALIZE_S,
                 threads: int | None = None, enabled: bool = True, max_entries: int = 512, schema_registry=None,
                 max_grammar_bytes: int | None = MAX_GRAMMAR_BYTES, cache_dir=None, cache_bytes: int = 1 << 30,
                 cache_min_s: float | None = None):
        self.tokenizer_info = tokenizer_info
        self.engine = check_engine(engine)
        self.timeout_s, self.normalize_s, self.threads, self.enabled = timeout_s, normalize_s, threads, enabled
        self.schema_registry = schema_registry  # referencing.Registry: documents remote $refs point to
        self.max_entries = max_entries
        self._xgrammar_options = {"max_grammar_bytes": max_grammar_bytes, "cache_dir": cache_dir,
                                  "cache_bytes": cache_bytes,
                                  **({"cache_min_s": cache_min_s} if cache_min_s is not None else {})}
        self._backends: dict[str, Backend] = {}
        self._cache: OrderedDict[str, Compiled] = OrderedDict()
        self._lock = threading.RLock()  # reentrant: the handoff backend is built from the other two
        self._relaxed: dict[str, list[dict]] = {}  # lenient constraint key -> the relaxed places (warned on each compile)
        self.stats = CacheStats()
        for name in ORDER[self.engine]:  # built now (llguidance: ~2 s per vocabulary), not in a request
            try:
                self._backend(name)
            except GrammarCompileError:
                if self.engine == "llguidance":
                    raise

    @classmethod
    def for_tokenizer(cls, tokenizer, *, model_vocab_size: int, stop_ids: list[int], **options) -> "Grammars":
        """A compiler over a Hugging Face ``tokenizer``; ``options``: :class:`Grammars`' keyword arguments."""
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model_vocab_size,
                                                  stop_token_ids=list(stop_ids))
        return cls(info, **options)

    def compile(self, c: Constraint, *, warn: bool = True) -> tuple[Compiled, float]:
        """Compiled grammar and the seconds this call spent (≈0 on a cache hit); a lenient schema that
        was relaxed warns (:class:`RelaxedSchemaWarning`) in the caller's thread, unless ``warn``
        is off (a caller that reports :meth:`relaxed_places` itself)."""
        out = self._compile(c)
        places = self.relaxed_places(c) if warn else []
        if places:
            note = "; ".join(f"{d['keyword']} at {d['pointer']}: {d['action']}" for d in places)
            warnings.warn(RelaxedSchemaWarning(f"{c.kind} partly enforced (the output is validated after): "
                                               f"{note}"), stacklevel=2)
        return out

    def flush(self) -> None:
        """Wait for the compiled grammars still being written to the disk cache."""
        for backend in list(self._backends.values()):
            backend.flush()

    def relaxed_places(self, c: Constraint) -> list[dict]:
        """What compiling the lenient constraint ``c`` relaxed (``[{keyword, pointer, action}]``, the
        pointers into its schema, or into its structural tag); empty when it compiled exactly, or was not
        compiled. The server names them in its ``Warning`` header instead of a warning."""
        with self._lock:
            return list(self._relaxed.get(self._key(c), ()))

    def _key(self, c: Constraint) -> str:
        """The cache key: the constraint's, with the engine that compiles it."""
        return c.key if c.engine else engine_key(self.engine, c.key)

    def _backend(self, name: str) -> Backend:
        with self._lock:
            if name not in self._backends:
                try:
                    self._backends[name] = load(name, self.tokenizer_info, threads=self.threads, parts=self._backend,
                                                **(self._xgrammar_options if name == "xgrammar" else {}))
                except ImportError:
                    raise NotForEngine(LLG_MISSING, keyword="grammar_engine") from None
            return self._backends[name]

    def _compile(self, c: Constraint) -> tuple[Compiled, float]:
        if not self.enabled:
            raise GrammarDisabled("grammar compilation is disabled (TYPEDLM_GRAMMAR=0)")
        t0 = time.perf_counter()
        key = self._key(c)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.stats.hits += 1
                return hit, time.perf_counter() - t0
        compiled = self._compile_uncached(c)
        dt = time.perf_counter() - t0
        with self._lock:
            self.stats.misses += 1
            self.stats.compile_seconds += dt
            self._cache[key] = compiled
            while len(self._cache) > self.max_entries:
                self._relaxed.pop(self._cache.popitem(last=False)[0], None)
            self.stats.entries = len(self._cache)
        return compiled, dt

    def _compile_uncached(self, c: Constraint) -> Compiled:
        """Compile in a worker thread and wait at most ``timeout_s``. xgrammar releases the GIL while
        it compiles but cannot be cancelled: a compile past the limit is abandoned (it finishes in the
        background and is dropped; interpreter exit waits for it) and the caller gets GrammarCompileTimeout
        at once."""
        box: dict = {}
        deadline = time.monotonic() + self.timeout_s

        def work():
            try:
                box["ok"] = self._build(c, deadline)
            except BaseException as e:  # handed to the caller below
                box["err"] = e

        worker = threading.Thread(target=work, name="typedlm-grammar-compile")  # joined at exit
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            with self._lock:
                self.stats.timeouts += 1
            raise GrammarCompileTimeout(f"{c.kind} compile exceeded the time limit of {self.timeout_s:g} s")
        if "err" in box:
            raise box["err"]
        return box["ok"]

    def _build(self, c: Constraint, deadline: float) -> Compiled:
        """The first backend of the engine choice that reads ``c`` exactly (the kinds llguidance does not
        compile are xgrammar's); a core form with unique arrays: wrapped in the decode-time guard
        (:mod:`.unique`; GrammarCompileError where no such check is exact)."""
        order = [n for n in ORDER[c.engine or self.engine] if c.kind in KINDS[n]] or ["xgrammar"]
        for i, name in enumerate(order):
            backend = self._backend(name)
            try:
                if backend.automata is None:  # it takes the core form each of its engines reads, when it asks
                    source = self._source(c, deadline, False)
                    given = self._sources(c, source)
                else:
                    given = source = self._source(c, deadline, backend.automata)
                plan = unique_plan(source) if c.kind == "json_schema" and has_unique(source) else None
                compiled = backend.compile(c, given)
                return compiled if plan is None else GuardedCompiled(compiled, plan, vocab_of(self.tokenizer_info))
            except NotForEngine:
                if i == len(order) - 1:
                    raise
            except GrammarCompileError:
                raise
            except Exception as e:  # the engines raise RuntimeError / ValueError / TypeError with a reason
                raise GrammarCompileError(f"{c.kind} does not compile: {_clean(e)}") from e
        raise GrammarCompileError(f"unknown constraint kind {c.kind!r}")

    def _sources(self, c: Constraint, without: Any):
        """``prepare(automata)`` for a backend of two engines: ``without`` (the core form without automata,
        already built) or the one with them, built when asked (in its own time limit: maybe in the background)."""
        def prepare(automata: bool) -> Any:
            if not automata or c.kind != "json_schema":
                return without
            return self._source(c, time.monotonic() + self.timeout_s, True)

        return prepare

    def _source(self, c: Constraint, deadline: float, automata: bool) -> Any:
        """What a backend compiles: the core form of a json_schema, the checked structural tag, else the value."""
        if c.kind == "json_schema":
            return self._core_schema(c, min(deadline, time.monotonic() + self.normalize_s), automata)
        if c.kind == "structural_tag":
            relaxed: list[dict] = []
            tag = _checked_tag(c.value, relaxed if c.lenient else None)
            self._note_relaxed(c, relaxed)
            return tag
        return c.value

    def _core_schema(self, c: Constraint, deadline: float, automata: bool = True) -> dict:
        """The core form of a json_schema constraint (``automata``: with those our EBNF for xgrammar reads,
        see :func:`.schema.prepare_schema`). ``lenient``: where a keyword is refused, the superset that
        drops only what must go, in one relaxing pass (:func:`.schema.prepare_lenient`), named by
        :meth:`relaxed_places` and a :class:`RelaxedSchemaWarning`; the output is still validated
        against the original schema (``schema_valid``)."""
        if not c.lenient:
            return prepare_schema(c.value, registry=self.schema_registry, deadline=deadline, automata=automata)
        core, places = prepare_lenient(c.value, registry=self.schema_registry, deadline=deadline, automata=automata)
        self._note_relaxed(c, places)
        return core

    def _note_relaxed(self, c: Constraint, places: list[dict]) -> None:
        if places:
            with self._lock:
                self._relaxed[self._key(c)] = places


def _checked_tag(node, relaxed: list[dict] | None, path: str = ""):
    """Structural tags embed JSON Schemas: each one goes through the refusal layer and gets the
    bounded-whitespace default; one whose core form needs our EBNF (:mod:`.schema.ebnf`) becomes a
    ``grammar`` format. ``any_order`` (drops required/uniqueness checks) and ``excludes`` (drops
    minLength/maxLength) are not exact, so they are refused too. ``relaxed`` (a lenient constraint: a
    list, else None): each schema is compiled as a lenient json_schema is (:func:`.schema.prepare_lenient`),
    its relaxed places appended there with the schema's path in the tag before their pointers."""
    if isinstance(node, list):
        return [_checked_tag(x, relaxed, f"{path}/{i}") for i, x in enumerate(node)]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema" and "json_schema" in node:
        for opt in ("any_order", "excludes"):
            if node.get(opt) and relaxed is None:
                raise GrammarCompileError(f"structural_tag{path}/{opt}: not enforced exactly (drops schema checks)",
                                          keyword=opt, pointer=f"{path}/{opt}")
    out = {k: _checked_tag(v, relaxed, f"{path}/{k}") for k, v in node.items()
           if not _is_embedded_schema(node, k)}
    for k, v in node.items():
        if not _is_embedded_schema(node, k):
            continue
        inner = f"{path}/{k}"
        try:
            if not isinstance(v, dict):
                out[k] = v
            elif relaxed is None:
                out[k] = prepare_schema(v)
            else:
                out[k], places = prepare_lenient(v)
                relaxed += [{**d, "pointer": inner + (d["pointer"] if d["pointer"] != "/" else "")} for d in places]
            if has_unique(out[k]):
                raise GrammarCompileError("uniqueItems is enforced by a guard beside a schema's own grammar, "
                                          "which a structural tag cannot embed", keyword="uniqueItems", pointer="/")
            private = needs_grammar(out[k])
            if private and node.get("type") == "json_schema" and node.get("style", "json") == "json":
                # the core form needs EBNF of ours: the content becomes a grammar format
                return {"type": "grammar", "grammar": to_ebnf(
                    out[k], any_whitespace=True, strict=False,
                    max_whitespace=node.get("max_whitespace_cnt") or MAX_WHITESPACE)}
            if private:
                raise GrammarCompileError(f"'{private}' needs a grammar of its own, which this structural tag "
                                          "cannot embed", keyword=private, pointer="/")
        except GrammarCompileError as e:
            raise GrammarCompileError(f"structural_tag{inner}: {e}", keyword=e.keyword,
                                      pointer=inner + (e.pointer if e.pointer != "/" else "")) from e
    if node.get("type") == "json_schema" and "json_schema" in node:
        out.setdefault("max_whitespace_cnt", MAX_WHITESPACE)
    return {k: out[k] for k in list(node) + [k for k in out if k not in node]}


def _is_embedded_schema(node: dict, key: str) -> bool:
    return (key == "json_schema" and node.get("type") == "json_schema") or (key == "schema" and "begin" in node)


def _clean(e: Exception) -> str:
    """xgrammar messages start with '[time] /path/file.cc:line: '; keep the reason."""
    msg = str(e).strip()
    if msg.startswith("[") and ": " in msg:
        msg = msg.split(": ", 1)[1] if ".cc:" in msg.split(": ", 1)[0] else msg
    return msg.splitlines()[0] if msg else type(e).__name__
