"""llguidance, the second grammar engine: the normalizer's core form as llguidance's JSON grammar, and a
matcher with the methods :mod:`.controller` calls on an xgrammar matcher.

Why: xgrammar precomputes a token-mask cache at compile time (MaskBench p99 4.5 s); llguidance builds a
lexer and Earley parser and computes each mask when asked, so a schema compiles in milliseconds
(``bench/results/compile-split-cpu.md``).

What llguidance gets, and why it is exact: the normalizer stays the single front end (it decides exact /
refused / relaxed) and llguidance reads the *core form* it emits. The core form means exactly the schema
as plain JSON Schema (jsonschema validates outputs against it); its ``x-typedlm-*`` keywords are
annotations that only tell our EBNF emitter (:mod:`.schema.ebnf`) how to build rules xgrammar's JSON
Schema subset lacks (lengths beside patterns, key classes, residues), so they are dropped here (the
compiler asks for a core form without the costly ones: ``prepare_schema(automata=False)``) and
llguidance enforces the keywords themselves: it implements ``minLength``/``maxLength`` beside
``pattern`` (regex intersection), escapes counted as one character, ``patternProperties`` exclusions.
Where it lacks one (``contains``, ``not``, ...) it refuses the schema by name (``lenient`` off) and
``auto`` takes xgrammar; ``minProperties``/``maxProperties`` beside optional keys and ``propertyNames``
are rewritten into keywords it reads (:mod:`.llg_objects`). Rewrites keep llguidance's reading equal to ours:

- a ``pattern`` (and a ``patternProperties`` name) is a whole-match ECMA-262 regex in the core form: it is
  anchored ``^(?:..)$`` and its class escapes spelled out (:func:`ecma_classes`; Rust's are Unicode);
- ``strict`` (xgrammar's ``strict_mode``: no properties or items beyond those listed) becomes
  ``additionalProperties: false`` / ``items: false`` where the node says nothing;
- a ``format`` left to xgrammar's grammar becomes that grammar's regex (:data:`FORMATS`).

Where llguidance differs it is stricter, never looser: no ``\\uXXXX`` escape of a printable character, no
exponent on a bounded number, only the canonical first token of forced text. Checked: the suite ratchets
``tests/data/jsonschema_ratchet/auto`` and ``.../llguidance`` (0 false positives), the fuzzers and
``tests/test_grammar_engines.py`` run both engines.
"""

from __future__ import annotations

import json
import os
import threading

from ..errors import GrammarCompileError
from .llg_objects import counted_object, named_properties
from .schema.ebnf import PRIVATE
from .spec import ENGINES

ENGINE_ENV = "TYPEDLM_GRAMMAR_ENGINE"
DEFAULT_ENGINE = "xgrammar"
LLG_KINDS = ("json_schema", "json_object")  # the kinds llguidance compiles; the others are xgrammar's


class NotForLLGuidance(GrammarCompileError):
    """The core form holds something llguidance does not read exactly as xgrammar (``keyword`` names it)."""


def check_engine(engine: str | None) -> str | None:
    """``engine`` itself when it is one of :data:`ENGINES` (or None); else GrammarCompileError naming the choices."""
    if engine is not None and engine not in ENGINES:
        raise GrammarCompileError(f"grammar engine {engine!r} is not one of {', '.join(ENGINES)}",
                                  keyword="grammar_engine")
    return engine


def engine_from_env() -> str:
    return check_engine(os.environ.get(ENGINE_ENV, "").strip().lower() or DEFAULT_ENGINE)


_TOKENIZERS: dict[int, tuple] = {}  # id(info) -> (info, its llguidance tokenizer); info kept so its id stays its own
_TOKENIZERS_LOCK = threading.Lock()


def llg_tokenizer(info):
    """:func:`build_tokenizer` once per ``info`` (thread-safe)."""
    with _TOKENIZERS_LOCK:
        if id(info) not in _TOKENIZERS:
            _TOKENIZERS[id(info)] = (info, build_tokenizer(info))
        return _TOKENIZERS[id(info)][1]


def build_tokenizer(info):
    """llguidance's tokenizer over the same vocabulary (bytes per id) and stop ids as xgrammar's
    ``TokenizerInfo`` ``info``, so both engines fill the same ``[B, ceil(V/32)]`` int32 bitmask layout.
    Warmed up here (the first mask walks the whole vocabulary, ~2 s: paid here, not by a request's
    compile)."""
    import llguidance
    import torch

    stops = list(info.stop_token_ids)
    vocab = list(info.decoded_vocab)
    special = set(info.special_token_ids) | set(stops)
    tokens = [b"\xff" + (b"<|typedlm_%d|>" % i) if i in special or not t else t for i, t in enumerate(vocab)]
    tokens += [b"\xff" + (b"<|typedlm_%d|>" % i) for i in range(len(tokens), info.vocab_size)]

    built: list = []

    class Vocab:  # what llguidance.TokenizerWrapper reads
        eos_token_id, bos_token_id, special_token_ids = stops[0], None, sorted(special)

        def __init__(self):
            self.tokens = tokens

        def __call__(self, text):  # llguidance tokenizes forced text with it: its own greedy trie walk
            if not built:
                raise TypeError("not ready")
            return built[0].greedy_tokenize(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)

    built.append(llguidance.LLTokenizer(llguidance.TokenizerWrapper(Vocab()), n_vocab=info.vocab_size,
                                        eos_token=stops))
    warm = LLGrammar(built[0], llg_grammar({}, any_whitespace=False, max_whitespace=None, strict=False))
    warm.matcher().fill_next_token_bitmask(torch.full((1, (info.vocab_size + 31) // 32), -1, dtype=torch.int32))
    return built[0]


def llg_schema(core, *, strict: bool):
    """The core form as llguidance reads it (module docstring), or NotForLLGuidance."""
    return _adapt(core, strict)


def _adapt(node, strict: bool):
    if isinstance(node, list):
        return [_adapt(x, strict) for x in node]
    if not isinstance(node, dict):
        return node
    if "format" in node:
        node = _format_as_pattern(node)
    out = {}
    for k, v in node.items():
        if k in PRIVATE or k == "uniqueItems":  # uniqueItems: the decode-time guard's (grammar/unique)
            continue
        if k in ("enum", "const"):
            out[k] = v
        elif k == "pattern":
            out[k] = _anchored(v)
        elif k == "patternProperties":
            out[k] = {_anchored(p): _adapt(s, strict) for p, s in v.items()}
        elif k in ("properties", "$defs"):
            out[k] = {name: _adapt(s, strict) for name, s in v.items()}
        else:
            out[k] = _adapt(v, strict)
    if strict and "additionalProperties" not in out and ("properties" in out or out.get("type") == "object"):
        out["additionalProperties"] = False
    if strict and "prefixItems" in out and "items" not in out:
        out["items"] = False
    if "propertyNames" in out:
        out = named_properties(out, _anchored, _declined("propertyNames"))
    return counted_object(out, _declined("minProperties"))


def _declined(keyword: str):
    def decline(reason: str):
        raise NotForLLGuidance(f"llguidance: {reason}", keyword=keyword)
    return decline


# The formats the core form leaves to xgrammar's own grammar, as the same regexes (of the decoded string).
# email: a dot-atom or a quoted local part (printable ASCII, backslash pairs), then xgrammar's host names.
_ATEXT = "[a-zA-Z0-9_!#$%&'*+/=?^`{|}~-]"
_QUOTED = '"([ !#-\\[\\]-~]|\\\\[ -~])*"'
_LABEL_TAIL = "[-A-Za-z0-9]*[A-Za-z0-9]"
FORMATS = {
    "email": f"({_ATEXT}+(\\.{_ATEXT}+)*|{_QUOTED})@[A-Za-z0-9]({_LABEL_TAIL})?(\\.[A-Za-z0-9]{_LABEL_TAIL})*",
    "uuid": "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
}


def _format_as_pattern(node: dict) -> dict:
    fmt = node["format"]
    if fmt not in FORMATS or "pattern" in node:
        raise NotForLLGuidance(f"format {fmt!r} is xgrammar's own grammar", keyword="format")
    return {("pattern" if k == "format" else k): (FORMATS[fmt] if k == "format" else v) for k, v in node.items()}


def _anchored(rx: str) -> str:
    if "(?!" in rx:  # a patternProperties name pattern ^(?!X)Y: Rust's regexes have no lookaround
        raise NotForLLGuidance(f"pattern {rx!r}: a lookahead (xgrammar gets its automaton)", keyword="patternProperties")
    return f"^(?:{ecma_classes(rx)})$"


# ECMA-262's class escapes, spelled out: llguidance's regexes are Rust's, where \s, \d, \w are Unicode
_ECMA_SPACE = "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_CLASSES = {"s": _ECMA_SPACE, "d": "0-9", "w": "0-9A-Za-z_"}


def ecma_classes(rx: str) -> str:
    """A core-form regex (ECMA-262 escapes) with ``\\s \\S \\d \\D \\w \\W`` as explicit classes (a
    negated one inside a class as a nested class: ``[x\\D]`` -> ``[x[^0-9]]``); NotForLLGuidance for ECMA's
    empty classes ``[]`` / ``[^]``, which Rust reads as a ``]``."""
    out, i, in_class = [], 0, False
    while i < len(rx):
        c = rx[i]
        if c == "\\" and i + 1 < len(rx):
            e = rx[i + 1]
            if rx.startswith("[\\s\\S]", i - 1) and e == "s":
                out.append("\\s\\S")  # anything: the same in both dialects
                i += 4
                continue
            if e.lower() in _CLASSES:
                body = _CLASSES[e.lower()]  # negated inside a class: a nested class (Rust: a union)
                out.append(body if in_class and e.islower() else f"[{'^' if e.isupper() else ''}{body}]")
            else:
                out.append(rx[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if rx.startswith("[^]", i) or rx.startswith("[]", i):  # ECMA: anything / nothing; Rust: a ']'
                raise NotForLLGuidance(f"pattern {rx!r}: an empty class", keyword="pattern")
        out.append(c)
        i += 1
    return "".join(out)


def llg_grammar(core, *, any_whitespace: bool, max_whitespace: int | None, strict: bool) -> str:
    """llguidance's grammar text for a core-form schema (JSON whitespace as xgrammar's: at most
    ``max_whitespace`` of space, newline, return, tab between tokens, or none)."""
    import llguidance

    if any_whitespace:
        ws = "[ \\n\\r\\t]" + (f"{{0,{max_whitespace}}}" if max_whitespace is not None else "*")
        options = {"whitespace_flexible": True, "whitespace_pattern": ws, "lenient": False}
    else:
        options = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":", "lenient": False}
    schema = llg_schema(core, strict=strict)
    return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema, ensure_ascii=False), overrides=options)


class LLGrammar:
    """A compiled llguidance grammar: a matcher in its start state that each row copies."""

    def __init__(self, tokenizer, grammar: str):
        import llguidance

        self.grammar = grammar
        self.proto = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self.proto.is_error():
            raise NotForLLGuidance(f"llguidance: {self.proto.get_error().splitlines()[0]}")
        warned = self.proto.get_grammar_warnings()
        if warned:
            raise NotForLLGuidance(f"llguidance: {warned[0]}")
        probe = self.proto.deep_copy()  # the first mask, computed now: a grammar with no JSON value fails it
        probe.compute_bitmask()
        if probe.is_error() or probe.is_accepting():  # measured: {"$ref": "#"} fails its first mask
            raise NotForLLGuidance(f"llguidance: no JSON value fits the grammar ({probe.get_error().splitlines()[0][:80]})")
        self.stop_token_ids = list(tokenizer.eos_tokens)
        self.tokenizer = tokenizer

    def matcher(self) -> "LLGMatcher":
        return LLGMatcher(self)


class LLGMatcher:
    """llguidance's ``LLMatcher`` under the names :mod:`.controller` uses on ``xgrammar.GrammarMatcher``."""

    def __init__(self, grammar: LLGrammar):
        self.inner = grammar.proto.deep_copy()
        self.stop_token_ids = grammar.stop_token_ids
        self._tokenizer = grammar.tokenizer

    def fill_next_token_bitmask(self, bitmask, index: int = 0) -> None:
        from llguidance.torch import fill_next_token_bitmask

        fill_next_token_bitmask(self.inner, bitmask, index)
        if self.inner.is_error():  # no token at all ("dead"), never a silent stop
            bitmask[index].zero_()

    def accept_token(self, token: int) -> bool:
        return not self.inner.is_error() and self.inner.consume_token(int(token))

    def rollback(self, n: int) -> None:
        self.inner.rollback(int(n))

    def accept_string(self, text: str) -> bool:
        ids = self._tokenizer.greedy_tokenize(text) if text else []
        return not self.inner.is_error() and self.inner.consume_tokens(ids)

    def is_completed(self) -> bool:
        return self.inner.is_accepting()

    def is_terminated(self) -> bool:
        return self.inner.is_stopped() and not self.inner.is_error()

    def find_jump_forward_string(self) -> str:
        forced = self.inner.compute_ff_bytes()
        for cut in range(len(forced), max(-1, len(forced) - 4), -1):  # drop a trailing partial character
            try:
                return forced[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
        return ""


THREADS_ENV = "TYPEDLM_LLG_THREADS"  # threads that fill llguidance's masks of a batch (read once)
_EXECUTOR: list = []  # llguidance's LLExecutor, made on first use (its thread pool lives for the process)
_EXECUTOR_LOCK = threading.Lock()


def llg_executor():
    """The one ``llguidance.LLExecutor`` of the process: its Rust thread pool has :data:`THREADS_ENV`
    threads, else llguidance's default (80 % of the cores, at most 32)."""
    with _EXECUTOR_LOCK:
        if not _EXECUTOR:
            import llguidance

            threads = os.environ.get(THREADS_ENV, "").strip()
            _EXECUTOR.append(llguidance.LLExecutor(int(threads) if threads.isdigit() and int(threads) > 0 else None))
        return _EXECUTOR[0]


def batch_fill_next_token_bitmask(matchers: list[LLGMatcher], bitmask, indices: list[int]) -> None:
    """Fill row ``indices[i]`` of ``bitmask`` (a contiguous ``[B, ceil(V/32)]`` int32 host tensor) with the
    mask of ``matchers[i]``, all in one call: llguidance's executor computes the masks on its threads with
    the GIL released (what :meth:`LLGMatcher.fill_next_token_bitmask` does row by row). A matcher in its
    error state gets an empty row, as there. One row is filled on the calling thread (no handoff: b1)."""
    from llguidance.torch import fill_next_token_bitmask_par

    if len(matchers) == 1:
        matchers[0].fill_next_token_bitmask(bitmask, indices[0])
        return
    fill_next_token_bitmask_par(llg_executor(), [(m.inner, i) for m, i in zip(matchers, indices)], bitmask)
    for m, i in zip(matchers, indices):
        if m.inner.is_error():
            bitmask[i].zero_()
