"""``oneOf`` by exclusivity proof (grammar/schema/exclusive.py, one_of.py): a pair of branches said to
exclude each other shares no instance per jsonschema, and a ``oneOf`` compiled on those proofs (or with
the narrowed complement) accepts exactly what jsonschema accepts."""

import itertools

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from typedlm.grammar.schema.exclusive import excludes
from typedlm.grammar.schema.rewrites import Normalizer

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
KEYS = ["t", "a", "b"]
VALUES = [None, True, False, 0, 1, 1.0, 1.5, 2, -1, "", "a", "b", "ab"]
NUMBER = st.fixed_dictionaries({"type": st.sampled_from(["integer", "number"])},
                               optional={"minimum": st.integers(-1, 2), "maximum": st.integers(-1, 2),
                                         "exclusiveMinimum": st.integers(-1, 2),
                                         "exclusiveMaximum": st.integers(-1, 2)})
SCALAR = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["null", "boolean", "integer", "number", "string"])}),
    st.fixed_dictionaries({"const": st.sampled_from(VALUES)}),
    st.fixed_dictionaries({"enum": st.lists(st.sampled_from(VALUES), min_size=1, max_size=3)}),
    st.fixed_dictionaries({"type": st.just("string")}, optional={"minLength": st.integers(0, 2),
                                                                   "maxLength": st.integers(0, 2)}),
    NUMBER)
OBJECT = st.fixed_dictionaries(
    {"properties": st.dictionaries(st.sampled_from(KEYS), SCALAR, max_size=2)},
    optional={"type": st.just("object"), "required": st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
              "additionalProperties": st.sampled_from([False, True, {"type": "integer"}]),
              "minProperties": st.integers(0, 2), "maxProperties": st.integers(0, 2)})
ARRAY = st.fixed_dictionaries(
    {"type": st.just("array")},
    optional={"prefixItems": st.lists(SCALAR, max_size=2), "items": SCALAR, "minItems": st.integers(0, 2),
              "maxItems": st.integers(0, 2), "uniqueItems": st.booleans()})
BRANCH = st.one_of(SCALAR, OBJECT, ARRAY, st.builds(lambda xs: {"anyOf": xs}, st.lists(SCALAR, min_size=1, max_size=2)))


def instances():
    """Every value of a small universe: scalars, objects of up to two of KEYS, arrays of up to three."""
    out = list(VALUES)
    for k in range(3):
        for keys in itertools.combinations(KEYS, k):
            out += [dict(zip(keys, vs)) for vs in itertools.product(VALUES, repeat=k)]
        out += [list(vs) for vs in itertools.product(VALUES, repeat=k)]
    out += [list(vs) for vs in itertools.product([0, "a", None], repeat=3)]
    return out


UNIVERSE = instances()


@SETTINGS
@given(a=BRANCH, b=BRANCH)
def test_a_pair_proven_exclusive_shares_no_instance(a, b):
    n = Normalizer({"$defs": {"a": a, "b": b}})
    try:
        x, y = n.builder.norm(a, "/a"), n.builder.norm(b, "/b")
    except Exception:  # noqa: BLE001 - a branch the normalizer refuses: nothing to prove
        return
    if not excludes(n, x, y):
        return
    va, vb = jsonschema.Draft202012Validator(a), jsonschema.Draft202012Validator(b)
    both = [v for v in UNIVERSE if va.is_valid(v) and vb.is_valid(v)]
    assert both == [], (a, b, both[:3])


@SETTINGS
@given(subs=st.one_of(*(st.lists(x, min_size=2, max_size=3) for x in (BRANCH, OBJECT, ARRAY))))
def test_one_of_accepts_exactly_what_jsonschema_accepts(subs):
    """The core form (proofs, narrowed complements) against jsonschema on the whole universe."""
    from typedlm.errors import EmptySchemaError, TypedLMError
    from typedlm.grammar.schema import prepare_schema
    from typedlm.grammar.schema.algebra import whole_match
    from typedlm.grammar.schema.formats import FORMAT_CHECKER

    schema = {"oneOf": subs}
    ref = jsonschema.Draft202012Validator(schema)
    try:
        core = prepare_schema(schema, automata=False)
    except EmptySchemaError:  # said to accept nothing: nothing in the universe is valid
        assert [v for v in UNIVERSE if ref.is_valid(v)] == [], schema
        return
    except TypedLMError:
        return
    got = jsonschema.Draft202012Validator(whole_match(core), format_checker=FORMAT_CHECKER)
    wrong = [v for v in UNIVERSE if got.is_valid(v) != ref.is_valid(v)]
    assert wrong == [], (schema, wrong[:3])


def refusals(schema):
    from typedlm.grammar.schema import find_refusals

    return [(r.keyword, r.pointer) for r in find_refusals(schema)]


@pytest.mark.parametrize("schema", [
    # distinct types; integer vs non-integral number; disjoint ranges
    {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "array", "items": {"$ref": "#"}}]},
    {"oneOf": [{"type": "integer"}, {"type": "number", "not": {"type": "integer"}}]},
    {"oneOf": [{"type": "number", "maximum": 0}, {"type": "number", "exclusiveMinimum": 0}]},
    # a required key the other branch forbids (additionalProperties: false), beside patternProperties
    {"oneOf": [{"type": "object", "required": ["record"], "additionalProperties": False,
                "properties": {"record": {"type": "string"}, "labels": {"patternProperties": {"^a": {}}}}},
               {"type": "object", "required": ["alert"], "additionalProperties": False,
                "properties": {"alert": {"type": "string"}, "labels": {"patternProperties": {"^b": {}}}}}]},
    # a tag on a required key (OpenAPI discriminator), the branches untyped
    {"discriminator": {"propertyName": "type"}, "oneOf": [
        {"required": ["type"], "properties": {"type": {"enum": ["jq"]}, "s": {"additionalProperties": {}}},
         "additionalProperties": False},
        {"required": ["type"], "properties": {"type": {"enum": ["yq"]}, "s": {"additionalProperties": {"type": "string"}}},
         "additionalProperties": False}]},
    # array shapes: lengths, and a position both have with exclusive items
    {"oneOf": [{"enum": ["on", "off"]},
               {"type": "array", "prefixItems": [{"enum": ["on"]}, {"type": "object"}], "minItems": 2, "items": False},
               {"type": "array", "prefixItems": [{"enum": ["on"]}, {"type": "string"}], "minItems": 2, "items": False}]},
])
def test_exclusive_one_of_compiles(schema):
    assert refusals(schema) == []


def test_truly_overlapping_branches_keep_the_named_refusal():
    """Both open objects take ``{"a": {}, "b": {}}``; the exact rewrite needs ``¬additionalProperties``
    of an open object (some unlisted key fails it): no branch says that."""
    schema = {"oneOf": [{"type": "object", "properties": {"a": {"additionalProperties": {"type": "string"}}}},
                        {"type": "object", "required": ["b"]}]}
    assert refusals(schema) == [("oneOf", "/oneOf")]


NARROWED = [  # overlapping pairs whose complement drops what the other branch implies; then proofs
    # a recursive $ref told apart by the type its schema declares (SchemaStore jsone.json)
    {"type": "object", "additionalProperties": {"oneOf": [
        {"$ref": "#"}, {"type": "array", "items": {"$ref": "#"}}, {"type": ["null", "string", "integer"]}]}},
    # arrays no longer than their prefix (items: false) vs ones that need more (eslintrc.json)
    {"oneOf": [{"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}], "items": False},
               {"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}, {}], "minItems": 3}]},
    {"oneOf": [{"type": "array", "minItems": 1}, {"type": "array", "minItems": 1, "maxItems": 1}]},
    {"oneOf": [{"type": "array", "maxItems": 2, "uniqueItems": True}, {"type": "array", "maxItems": 3, "uniqueItems": True,
                                                                       "items": {"type": "integer"}}]},
    {"oneOf": [{"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}},
               {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer", "minimum": 0}], "items": {"type": "integer"}}]},
    {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
               {"type": "object", "properties": {"a": {"type": "number"}, "b": {}}, "required": ["b"]}]},
    {"oneOf": [{"type": "object", "properties": {"a": {"type": "object", "additionalProperties": {"type": "string"}},
                                                 "t": {"const": "a"}}, "additionalProperties": False},
               {"type": "object", "properties": {"a": {"type": "object", "additionalProperties": {"type": "string"}},
                                                 "t": {"const": "b"}}, "additionalProperties": False}]},
    {"oneOf": [{"type": "object", "minProperties": 1, "required": ["a"]}, {"type": "object", "minProperties": 1}]},
]


NESTED = [{k: v for k, v in zip(keys, vs)} for n in range(3) for keys in itertools.combinations(KEYS, n)
          for vs in itertools.product([1, {}, {"a": 1}, {"b": 1}, {"a": 1, "b": 1}, {"t": 1, "a": 1}], repeat=n)]
NESTED += [list(vs) for n in range(3) for vs in itertools.product([1, "a", {}, {"a": 1}, {"a": "a"}, {"b": 1}], repeat=n)]
NARROWED.append(  # some item fails the other's items, within this branch's items
    {"oneOf": [{"type": "array", "items": {"type": ["integer", "string"], "minimum": 0}},
               {"type": "array", "prefixItems": [{"type": "integer"}], "maxItems": 1}]})
NARROWED.append(
    {"oneOf": [{"type": "array", "items": {"type": "integer", "minimum": 0}},
               {"type": "array", "items": {"type": "integer", "maximum": 1}}]})
NARROWED.append(  # a nested closed object: ¬additionalProperties: false over its keys' subsets (ubuntu autoinstall)
    {"oneOf": [{"type": "object", "required": ["a"]},
               {"type": "object", "required": ["b"], "properties": {"b": {"type": "object", "properties": {
                   "a": {}, "t": {"type": "integer"}}, "additionalProperties": False}}}]})


@pytest.mark.parametrize("schema", NARROWED)
def test_narrowed_complements_are_exact(schema):
    from typedlm.errors import EmptySchemaError
    from typedlm.grammar.schema import prepare_schema
    from typedlm.grammar.schema.algebra import whole_match

    ref = jsonschema.Draft202012Validator(schema)
    try:
        got = jsonschema.Draft202012Validator(whole_match(prepare_schema(schema, automata=False))).is_valid
    except EmptySchemaError:
        got = lambda v: False  # noqa: E731 - said to accept nothing
    assert any(ref.is_valid(v) for v in UNIVERSE)
    assert [v for v in UNIVERSE + NESTED if got(v) != ref.is_valid(v)] == []
