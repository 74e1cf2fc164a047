"""Plan: a schema compiled for one tokenizer and one scoring mode (cached on the Engine).

A plan is a list of *questions*. Each question is answered by the JSON text
``{"<key>":<candidate>}``: the row feeds the cue ``{"<key>":`` and the candidate text is
``canonical_json(value) + "}"`` (prefix-free: JSON strings end in an unescaped quote, and every
candidate ends by closing its object). Questions:

  scalar  one per boolean / enum field; key = field name; values = choices (booleans: true/false)
  option  one per option of a multi field; key ``<field>":{"<option or code>`` ; values true/false
  count   one per multi field; key ``<field>.count``; values 0..N

Scoring modes: ``labels`` (the candidate is the choice text) and ``slots`` (short alias codes,
searched per tokenizer so the codes of a field diverge at a single token; the prompt shows
code = meaning). Booleans and counts are the same in both modes.
"""

from __future__ import annotations

import functools
import itertools
import string
from dataclasses import dataclass

from ..engine import Engine
from ..grammar.spec import canonical_json
from .schema import DecisionSchema, Field, SchemaError
from .trie import Trie, build_trie

SCORING_MODES = ("labels", "slots")
DEFAULT_SCORING = "labels"  # chosen by measurement: docs/ARCHITECTURE.md, "Decisions"
NONE_OF_ABOVE = "none_of_above"  # value key of the extra choice allow_none_of_above adds to enum fields
NONE_LABEL = "none of the above"


@dataclass(frozen=True)
class Question:
    field: str
    kind: str  # "scalar" | "option" | "count"
    option: str | None  # option questions: the option (choice value) asked about
    cue: tuple[int, ...]
    keys: tuple[str, ...]  # result keys of the candidates: choice values / "true","false" / "0".."N"
    texts: tuple[str, ...]  # candidate texts as scored (code or label JSON + "}")
    trie: Trie


@dataclass(frozen=True)
class Row:
    question: int
    ids: tuple[int, ...]  # cue + feed
    reads: tuple[tuple[int, int], ...]  # (branch point index, logits position in ids)


@dataclass(frozen=True)
class Plan:
    schema: DecisionSchema
    scoring: str
    none_of_above: bool
    questions: tuple[Question, ...]
    rows: tuple[Row, ...]
    codes: dict  # field -> {choice value: shown code}; labels mode: value -> value

    @functools.cached_property
    def memo(self) -> dict:
        """What later stages derive from this plan alone, built once per plan (the plan is cached on the engine):
        the scoring's row tree, the prompt record. Not part of the plan's value."""
        return {}

    def shown(self, field: str, value: str) -> str:
        return self.codes[field][value]

    def choices(self, f: Field) -> list[tuple[str, str | None]]:
        """(value, description) pairs as offered, with none-of-the-above last when enabled."""
        out = [(c.value, c.description) for c in f.choices]
        if f.type == "enum" and self.none_of_above and f.nullable:
            out.append((NONE_OF_ABOVE, None))
        return out


def get_plan(engine: Engine, schema: DecisionSchema, scoring: str = DEFAULT_SCORING,
             none_of_above: bool = False) -> Plan:
    """The compiled plan for this engine's tokenizer (cached in ``engine.caches.plans``)."""
    if scoring not in SCORING_MODES:
        raise SchemaError(f"scoring must be one of {', '.join(SCORING_MODES)}, got {scoring!r}")
    return engine.caches.plans.get_or_build((schema.key, scoring, bool(none_of_above)),
                                     lambda: compile_plan(engine.tokenizer, schema, scoring, none_of_above))


def compile_plan(tokenizer, schema: DecisionSchema, scoring: str = DEFAULT_SCORING,
                 none_of_above: bool = False) -> Plan:
    enc = _encoder(tokenizer)
    questions: list[Question] = []
    codes: dict = {}
    tmp = Plan(schema, scoring, none_of_above, (), (), {})
    for f in schema.fields:
        if f.type == "boolean":
            codes[f.name] = {}
            questions.append(_question(enc, f, "scalar", None, f.name, ["true", "false"], ["true", "false"]))
            continue
        values = [v for v, _ in tmp.choices(f)]
        shown = _slot_codes(enc, values, f.ordered) if scoring == "slots" else [
            NONE_LABEL if v == NONE_OF_ABOVE else v for v in values]
        codes[f.name] = dict(zip(values, shown))
        if f.type == "enum":
            texts = [canonical_json(s) for s in shown]
            questions.append(_question(enc, f, "scalar", None, f.name, values, texts))
        else:  # multi: one yes/no question per option + a count question
            for v, s in zip(values, shown):
                key = f'{f.name}":{{"{_inner(s)}'
                questions.append(_question(enc, f, "option", v, key, ["true", "false"], ["true", "false"]))
            counts = [str(i) for i in range(len(values) + 1)]
            questions.append(_question(enc, f, "count", None, f"{f.name}.count", counts, counts))
    rows = []
    for qi, q in enumerate(questions):
        for feed, reads in q.trie.rows:
            rows.append(Row(qi, q.cue + feed, tuple((p, len(q.cue) + k - 1) for p, k in reads)))
    return Plan(schema, scoring, none_of_above, tuple(questions), tuple(rows), codes)


def _inner(s: str) -> str:
    return canonical_json(s)[1:-1]  # JSON string body (escaped), to sit inside a key


def _encoder(tokenizer):
    memo: dict[str, tuple[int, ...]] = {}

    def enc(text: str) -> tuple[int, ...]:
        if text not in memo:
            memo[text] = tuple(tokenizer.encode(text, add_special_tokens=False))
        return memo[text]
    return enc


def _question(enc, f: Field, kind: str, option: str | None, key: str, keys: list[str], texts: list[str]) -> Question:
    cue = enc('{"' + key + '":')
    full = [t + "}" for t in texts]
    paths = [enc(t) for t in full]
    seen: dict[tuple, str] = {}
    for k, p in zip(keys, paths):
        if p in seen:
            raise SchemaError(f"field '{f.name}': choices {seen[p]!r} and {k!r} tokenize identically")
        seen[p] = k
    try:
        trie = build_trie(paths)
    except ValueError as e:  # cannot happen for JSON candidates closed by "}"; kept as a loud guard
        raise SchemaError(f"field '{f.name}': {e}") from e
    return Question(f.name, kind, option, cue, tuple(keys), tuple(full), trie)


def _code_pool(ordered: bool):
    singles = list(string.digits[1:] + "0") if ordered else list(string.ascii_uppercase)
    rest = list(string.ascii_uppercase) if ordered else list(string.digits)
    yield from singles + rest + list(string.ascii_lowercase)
    for a, b in itertools.product(string.ascii_uppercase, repeat=2):
        yield a + b


def _slot_codes(enc, values: list[str], ordered: bool) -> list[str]:
    """Codes for ``values`` whose candidate texts ``"<code>"}`` all share a token prefix and diverge at
    one token: one branch point, so the field costs one short row. Falls back to any codes with
    distinct tokenizations (still correct, more rows) if no such set exists."""
    n = len(values)
    pool = list(_code_pool(ordered))
    toks = {c: enc(canonical_json(c) + "}") for c in pool}
    for k in (1, 0, 2):
        groups: dict[tuple, dict[int, str]] = {}
        for c in pool:
            t = toks[c]
            if len(t) > k:
                g = groups.setdefault(t[:k], {})
                g.setdefault(t[k], c)
        for g in groups.values():
            if len(g) >= n:
                chosen = sorted(g.values(), key=pool.index)[:n]
                return chosen
    chosen, seen = [], set()
    for c in pool:
        if toks[c] not in seen:
            seen.add(toks[c])
            chosen.append(c)
        if len(chosen) == n:
            return chosen
    raise SchemaError(f"no slot codes for {n} choices: too many choices for slots scoring; use labels")
