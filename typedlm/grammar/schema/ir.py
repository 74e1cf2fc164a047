"""The typed nodes of the core form that only our EBNF emitter (:mod:`.ebnf`) reads.

The core form is JSON Schema: jsonschema, llguidance and ``json.dumps`` read its standard keywords. Where
xgrammar's JSON Schema subset cannot say what a node means, the emitter (:mod:`.emit`) returns a
:class:`Core` node: its standard keywords (the same meaning, for every other reader) and ``ir``, one of the
dataclasses below, whose child schemas are core-form nodes themselves (definitions referenced by
``$ref`` name). Equality includes ``ir``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ItemClass:
    """The items of an array that match exactly the ``contains`` constraints in bit set ``mask``."""
    mask: int
    schema: dict


@dataclass(frozen=True)
class Contains:
    """An array under ``contains`` counts: per prefix position, then for later items, the item classes;
    ``bounds``: ``(min, max)`` per constraint (max None: unbounded)."""
    keyword = "contains"
    bounds: tuple[tuple[int, int | None], ...]
    prefix: tuple[tuple[ItemClass, ...], ...]
    tail: tuple[ItemClass, ...]


@dataclass(frozen=True)
class Listed:
    """A listed property: its value schema (None: no value allowed) and whether it is required."""
    name: str
    value: dict | None
    required: bool


@dataclass(frozen=True)
class KeyClass:
    """Other keys of one class: their automaton (``{"initial", "finals", "edges"}``, :func:`.keys.spec`)
    and the schema their values match."""
    keys: dict
    value: dict


@dataclass(frozen=True)
class KeyClasses:
    """An object: listed names in order, then any number of other keys, each in one class."""
    keyword = "patternProperties"
    listed: tuple[Listed, ...]
    others: tuple[KeyClass, ...]


@dataclass(frozen=True)
class Residues:
    """Integers: ``values`` listed, and positive / negative ones of at least ``pos`` / ``neg`` digits (None:
    none) whose remainder modulo ``modulus`` is in ``residues``."""
    keyword = "multipleOf"
    modulus: int
    residues: tuple[int, ...]
    values: tuple[int, ...]
    pos: int | None
    neg: int | None


@dataclass(frozen=True)
class Fraction:
    """A non-integral number."""
    keyword = "type"


@dataclass(frozen=True)
class Text:
    """A string (``quoted``) or a number's text: the automaton times a length counter
    (:func:`.strings.length_spec`, :func:`.numbers.range_spec`)."""
    spec: dict
    quoted: bool = True

    @property
    def keyword(self) -> str:
        return "pattern" if self.quoted else "minimum"


IR = Contains | KeyClasses | Residues | Fraction | Text


class Core(dict):
    """A core-form node: the standard keywords (the dict) and ``ir``, what our EBNF needs beside them."""

    __slots__ = ("ir",)

    def __init__(self, keywords: dict, ir: IR):
        super().__init__(keywords)
        self.ir = ir

    def __eq__(self, other):
        return dict.__eq__(self, other) and self.ir == getattr(other, "ir", None)

    def __ne__(self, other):
        return not self == other

    __hash__ = None  # a dict

    def __repr__(self) -> str:
        return f"Core({dict.__repr__(self)}, {self.ir!r})"

    def __reduce__(self):
        return Core, (dict(self), self.ir)


def ir_of(node) -> IR | None:
    """The typed node that core-form ``node`` carries, or None."""
    return node.ir if isinstance(node, Core) else None


def with_keywords(node: dict, drop: tuple[str, ...] = (), **keywords) -> dict:
    """``node`` without keywords ``drop`` and with ``keywords`` added (its typed node kept)."""
    out = {**{k: v for k, v in node.items() if k not in drop}, **keywords}
    return Core(out, node.ir) if isinstance(node, Core) else out


def needs_grammar(core) -> str | None:
    """The keyword of the first typed node in ``core`` (the core form needs our EBNF), or None."""
    if isinstance(core, Core):
        return core.ir.keyword
    if isinstance(core, dict):
        return next((k for k in map(needs_grammar, core.values()) if k), None)
    if isinstance(core, list):
        return next((k for k in map(needs_grammar, core) if k), None)
    return None
