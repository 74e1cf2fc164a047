"""Normalize a JSON Schema into the *core form* xgrammar enforces exactly, or refuse.

:class:`Normalizer` is one run over one schema: building (:mod:`.build`: schema objects to
branches), intersection and complement (:mod:`.algebra`) and emission (:mod:`.emit`, then
:mod:`.ebnf` for the nodes xgrammar's JSON Schema subset cannot say), over the branch representation
of :mod:`.branches`.

Core form: a disjunction (``anyOf``) of branches; a branch is ``{"enum": [...]}`` or one JSON type
with only keywords xgrammar enforces for that type (or a typed :mod:`.ir` node, see :mod:`.ebnf`),
or a ``$ref`` to a recursive definition.
Every rewrite is exact (the output accepts exactly the instances the input accepts, given that
xgrammar enforces the core keywords); where no exact rewrite exists, :class:`Refuse` names the
keyword and its JSON pointer. The rewrites (each pinned by tests/grammar/schema/test_rewrites.py):

- ``type`` split: a schema without ``type`` becomes one branch per JSON type, each carrying only its
  own keywords (``{"maximum": 3}`` accepts every non-number).
- ``enum``/``const`` filter: a schema with ``enum``/``const`` (or an ``allOf`` part with one) becomes
  the list of its values that jsonschema accepts against the whole subschema.
- ``allOf`` / ``$ref`` beside keywords: exact intersection of branches (bounds tightened, property
  schemas intersected, ``required`` united, items position by position).
- ``anyOf`` beside keywords: distributed over the branches.
- ``oneOf``: ``anyOf`` when its branches are pairwise disjoint, else ``(A ∧ ¬B) ∨ (¬A ∧ B)``.
- ``not``, ``if``/``then``/``else``: complement of type sets, numeric bounds, lengths, item and
  property counts, ``required`` and single ``properties``; ``(if ∧ then) ∨ (¬if ∧ else)``.
- ``dependentRequired`` / ``dependentSchemas``: ``(key absent) ∨ (key present ∧ dependency)``; an
  absent key is a property whose schema accepts nothing.
- ``required`` names missing from ``properties``: listed with the ``additionalProperties`` schema.
- ``multipleOf``: integral divisors on integers (a number multiple of an integer is an integer);
  beside bounds: the values near a bound listed, the unbounded side by a remainder automaton.
- integer bounds: made whole (``minimum: 1.5`` -> ``2``; exclusive bounds made inclusive).
- ``pattern`` / ``patternProperties``: search semantics, ECMA ``.`` and ``\\s``, anchors per top-level
  alternative (see refusal.rewrite_pattern); a string's patterns go to the grammar as automata
  (:mod:`.strings`): ``minLength``/``maxLength`` beside a pattern or format regex (a length counter),
  several patterns (intersection), ``not`` over a pattern (complement).
- key order: properties in the order the schema wrote them (``$ref``/``allOf`` members in order); a
  name known only from ``required`` after the listed ones (``algebra.key_order``).
- formats: asserted under every draft (``formats.FORMAT_CHECKER``).
- ``uniqueItems`` over a finite array space (positions that are enums/booleans/null, bounded
  length): the enum of every array of distinct values; on arrays of at most one item: dropped.
- ``contains``/``minContains``/``maxContains`` (up to 3 per array): items split into classes by the
  ``contains`` schemas they match (``items ∧ C`` / ``items ∧ ¬C``), counted by an automaton; with
  ``minContains: 0`` and no maximum only its annotation stays (the items it matches are evaluated).
- ``patternProperties`` (several, beside ``properties``), ``propertyNames``, names needing escapes:
  keys in classes by the patterns they match (automata: intersections and complements), each with
  the intersection of its schemas; a listed name's value also meets the patterns it matches. A name
  pattern ``^(?!X)Y``: the names ``^Y`` matches minus those X excludes (``refusal.lookahead_split``).
- complements: ``integer`` -> non-integral numbers (no exponent, at most 15 digits), ``multipleOf``
  -> other residues, a number enum -> the open intervals between its values.
- ``unevaluatedProperties``/``unevaluatedItems`` with no in-place applicator: turned into
  ``additionalProperties``/``items``, their exact meaning there; after applicators: applied to the
  keys/items no part evaluated.
"""

from __future__ import annotations

import copy
import time

import jsonschema
import referencing

from ...errors import EmptySchemaError, GrammarCompileError
from .algebra import Algebra
from .build import Builder
from .drafts import draft_of
from .emit import Emitter
from .formats import FORMAT_CHECKER
from .ir import with_keywords
from .refusal import Refusal, Refuse

INTERNAL = "the schema could not be analysed (a typedlm bug; please report it)"


class Normalizer:
    """One normalization: its state (resolver, draft, ``$ref`` memo, deadline) and its three parts, each
    handed this run explicitly: ``builder`` (:mod:`.build`), ``algebra`` (:mod:`.algebra`: intersection,
    complement) and ``emitter`` (:mod:`.emit`), over the branch representation (:mod:`.branches`)."""

    def __init__(self, root, registry: referencing.Registry | None = None, deadline: float | None = None,
                 automata: bool = True, relax: bool = False):
        self.root = root
        self.deadline = deadline
        self.automata = automata  # emit the automata our EBNF (xgrammar) needs
        self.relax = relax  # a superset where a keyword is refused (:mod:`.weaken`)
        self.relaxed: list[dict] = []  # what was dropped where
        self.relax_events = 0  # drops met so far, a relaxed $ref target's reuse included (never rolled back)
        self.relaxed_targets: set = set()  # memo keys of $ref targets built with a drop
        self.draft = draft_of(root)
        try:
            resource = referencing.Resource.from_contents(root, default_specification=self.draft.spec)
            base = resource.id() or ""
            self.registry = (registry or referencing.Registry()).with_resource(base, resource).crawl()
        except Exception as e:
            raise Refuse("$id", "", f"the schema's identifiers are invalid: {e}") from e
        self.res = self.registry.resolver(base_uri=base)
        self.root_res = self.res
        # the draft's validator judges the user's schema objects; the 2020-12 one judges core forms
        self.validators = {}
        self.core_validator = jsonschema.Draft202012Validator(
            {}, format_checker=FORMAT_CHECKER)
        self.memo: dict[int, list] = {}  # $ref target (by identity) -> branches
        self.active: set[int] = set()
        self.cyclic: set[int] = set()
        self.names: dict[int, str] = {}
        self.keep: list = []  # every $ref target met (memo keys are their ids)
        self.builder, self.algebra, self.emitter = Builder(self), Algebra(self), Emitter(self)

    def mark(self) -> tuple[int, int, frozenset]:
        """The state a failed build of one object returns to (:meth:`rollback`)."""
        return len(self.memo), len(self.relaxed), frozenset(self.cyclic)

    def rollback(self, mark: tuple[int, int, frozenset]) -> None:
        """After a failed build: forget the drops it recorded and, where it met a recursive ``$ref`` whose
        build it began (so never finished), what it memoized (that may refer to the unfinished target)."""
        memo_len, relaxed_len, cyclic = mark
        if len(self.cyclic) > len(cyclic):
            for key in list(self.memo)[memo_len:]:
                del self.memo[key]
            self.cyclic.intersection_update(cyclic)
        del self.relaxed[relaxed_len:]

    def check_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise NormalizeTimeLimit("rewriting the schema ran past its time limit", keyword="(time limit)",
                                     pointer="/")

    def run(self) -> dict:
        d = self.builder.ref("#", "") if isinstance(self.root, dict) else self.builder.norm(self.root, "")
        if not d:
            raise EmptySchemaError("the schema accepts no value: its constraints contradict each other")
        out = self.emitter.emit(d)
        if self.cyclic:
            defs, todo, done = {}, list(self.cyclic), set()
            while todo:
                p = todo.pop()
                if p not in done:
                    done.add(p)
                    defs[self.def_name(p)] = self.emitter.emit(self.memo[p])
                    todo.extend(self.cyclic - done)
            out = with_keywords(out, **{"$defs": defs}) if "$ref" not in out else {"allOf": [out], "$defs": defs}
        return out

    def def_name(self, key: int) -> str:
        return self.names.setdefault(key, f"typedlm_{len(self.names)}")

    def valid(self, value, schema, p, core=False) -> bool:
        """Whether jsonschema accepts ``value`` under a schema object of the user's (its draft, the
        current base URI) or, with ``core``, under an emitted core-form schema (2020-12)."""
        try:
            if core:
                return self.core_validator.evolve(schema=schema).is_valid(value)
            v = self.validators.get(self.draft.name)
            if v is None:
                # given the resolver (each use sets it): jsonschema would otherwise combine the whole
                # registry with its metaschemas, O(registry) (190 ms for MaskBench's 9,795 documents)
                v = self.validators[self.draft.name] = self.draft.validator(
                    {}, registry=self.registry, format_checker=FORMAT_CHECKER, _resolver=self.res)
            return v.evolve(schema=schema, _resolver=self.res).is_valid(value)
        except Exception as e:  # unresolvable $ref, bad regex, ...
            raise Refuse("$ref" if "ref" in type(e).__name__.lower() else "(schema)", p,
                         f"cannot evaluate the schema here: {type(e).__name__}") from e


def find_refusals(schema, registry: referencing.Registry | None = None) -> list[Refusal]:
    """The keyword (with its pointer) that stops ``schema`` from being enforced exactly; [] when none."""
    try:
        Normalizer(schema, registry).run()
    except Refuse as r:
        return [r.refusal]
    except GrammarCompileError as e:  # a run-wide limit (algebra.MAX_MEETS)
        return [Refusal(e.keyword or "(schema)", e.pointer or "/", str(e))]
    except RecursionError:
        return [Refusal("$ref", "", "the schema nests too deeply")]
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
        return [Refusal("(schema)", "", f"{INTERNAL}: {type(e).__name__}: {e}")]
    return []


class NormalizeTimeLimit(GrammarCompileError):
    """The normalizer ran past its deadline: a refusal named ``(time limit)``, never a partial core form."""


def prepare_schema(schema: dict, *, lenient: bool = False, registry: referencing.Registry | None = None,
                   deadline: float | None = None, automata: bool = True) -> dict:
    """The core-form schema to compile (exact), or GrammarCompileError naming keyword and pointer.
    ``lenient``: compile the schema as given even where it would not be enforced.
    ``registry``: documents that remote ``$ref`` s may point to (nothing is ever fetched).
    ``deadline``: ``time.monotonic()`` value past which the rewrite gives up (GrammarCompileError).
    ``automata``: build the automata our EBNF for xgrammar reads (:class:`.ir.Text`, :class:`.ir.KeyClasses`);
    off for llguidance, which reads patterns, lengths and key sets itself (the same core form without them:
    faster, and no refusal of an automaton too large for a grammar of ours)."""
    return _run(lambda: Normalizer(copy.deepcopy(schema), registry, deadline, automata),
                schema if lenient else None)[0]


def prepare_relaxed(schema: dict, *, registry: referencing.Registry | None = None,
                    deadline: float | None = None, automata: bool = True) -> tuple[dict, list[dict]]:
    """(core form of a superset of ``schema``, the relaxed places ``[{keyword, pointer, action}]``; empty:
    exact) in one pass (:mod:`.weaken`); GrammarCompileError for a refusal met after building (emission).
    ``automata``: as :func:`prepare_schema`."""
    return _run(lambda: Normalizer(copy.deepcopy(schema), registry, deadline, automata, relax=True))


def prepare_lenient(schema, *, registry: referencing.Registry | None = None, deadline: float | None = None,
                    automata: bool = True) -> tuple[dict, list[dict]]:
    """(core form, the relaxed places) of a lenient schema: its exact core form with no places where
    nothing is refused, else the one relaxing pass's superset (:func:`prepare_relaxed`). A refusal that
    pass meets where it must stay exact, or that names no keyword, is raised (GrammarCompileError)."""
    try:
        return prepare_schema(schema, registry=registry, deadline=deadline, automata=automata), []
    except GrammarCompileError as e:
        if not e.keyword or isinstance(e, (EmptySchemaError, NormalizeTimeLimit)):
            raise
    return prepare_relaxed(schema, registry=registry, deadline=deadline, automata=automata)


def _run(make, on_refusal: dict | None = None) -> tuple[dict, list[dict]]:
    """(``make().run()``, its relaxed places) with every failure a GrammarCompileError (``on_refusal``:
    returned instead of a refusal)."""
    try:
        n = make()
        return n.run(), n.relaxed
    except Refuse as r:
        if on_refusal is not None:
            return on_refusal, []
        raise GrammarCompileError(r.refusal.message(), keyword=r.refusal.keyword,
                                  pointer=r.refusal.pointer or "/") from None
    except RecursionError:
        raise GrammarCompileError("the schema nests too deeply", keyword="$ref", pointer="/") from None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:  # a bug here: never a crash
        raise GrammarCompileError(f"{INTERNAL}: {type(e).__name__}: {e}") from e
