"""``oneOf`` rewrites: pruning covered branches (grammar/schema/subsume.py: exact in values and in key
order), which lets nested overlapping ``oneOf`` compile, and branches judged within their context."""

import itertools

import jsonschema
import pytest

from typedlm.grammar.schema.branches import Enum, Number, Object, String, any_
from typedlm.grammar.schema.subsume import covers, prune
from typedlm.grammar.spec import make_constraint

NEVER: list = []


def obj(*names, required=(), **kw):
    """An object branch listing ``names`` (a trailing '!' : the key must be absent)."""
    props = {n.rstrip("!"): NEVER if n.endswith("!") else any_() for n in names}
    return Object(properties=props, required=tuple(required), **kw)


def test_a_narrower_object_is_dropped_and_twins_said_once():
    wide, narrow = obj("a", required=["a"]), obj("a", "b", required=["a", "b"])
    assert covers(wide, narrow) and not covers(narrow, wide)
    assert prune([narrow, wide, wide]) == [wide]
    assert prune([obj("a", "c!", required=["a"]), wide]) == [wide]  # c absent: narrower


def test_key_order_and_extra_keys_decide_too():
    # b writes a before b; a branch listing b first writes them the other way round: not the same texts
    assert not covers(obj("b", "a"), obj("a", "b", required=["a", "b"]))
    # a key b lists that a does not: a writes it after its own keys only when extra keys are free
    assert covers(obj("a"), obj("a", "x", required=["x"]))
    assert not covers(obj("a", additional=NEVER), obj("a", "x", required=["x"]))
    assert not covers(obj("x", "a"), obj("a", "x", required=["x"]))
    # a key only the wider one lists: the other writes it among its extra keys, elsewhere
    assert not covers(obj("a", "z"), obj("a"))


def test_what_unevaluated_keywords_read_must_agree():
    assert not covers(obj("a"), obj("a", "b", evaluated_names=frozenset({"a"})))
    assert not covers(obj("a", partial=True), obj("a", "b"))


def test_scalars_and_enums():
    assert covers(Number(), Number(integer=True, lo=(0, False)))
    assert not covers(Number(integer=True), Number())
    assert covers(String(), String(pattern="a+"))
    assert not covers(String(max_length=3), String())
    assert covers(Enum([1, "a"]), Enum(["a"]))
    assert not covers(Enum([1]), Enum([1.0])) and not covers(Enum([True]), Enum([1]))  # written differently
    assert not covers(Enum(["a"]), String())


@pytest.fixture(scope="module")
def grammars():
    from tests.support.grammar import default_grammars

    return default_grammars()


NESTED_ONE_OF = {
    "$defs": {"pair": {"oneOf": [{"required": ["c"], "properties": {"c": True}},
                                 {"required": ["d"], "properties": {"d": True}}]}},
    "oneOf": [{"oneOf": [{"$ref": "#/$defs/pair"}, {"required": ["b"], "properties": {"b": True}},
                         {"required": ["all"]}]},
              {"required": ["a"], "properties": {"a": True}}],
    "unevaluatedProperties": False,
}


def test_nested_overlapping_one_of_compiles_exactly(grammars):
    """Refused before pruning ('more than 64 alternatives'): every complement multiplied the branches."""
    from tests.support.grammar import accepts, renderings
    from typedlm.grammar.schema import prepare_schema

    compiled, _ = grammars.compile(make_constraint(json_schema=NESTED_ONE_OF, strict=False, any_whitespace=False))
    core = prepare_schema(NESTED_ONE_OF)
    validator = jsonschema.Draft202012Validator(NESTED_ONE_OF)
    names = ["a", "b", "c", "d", "all", "z"]
    seen = set()
    for k in range(4):
        for keys in itertools.combinations(names, k):
            inst = {n: 1 for n in keys}
            valid = validator.is_valid(inst)
            seen.add(valid)
            assert any(accepts(compiled, t) for t in renderings(inst, core)) == valid, inst
    assert seen == {True, False}


TAGGED = {"type": "object", "oneOf": [
    {"properties": {"t": {"enum": ["a"]}, "x": {"type": "number"}}, "required": ["t"], "additionalProperties": False},
    {"properties": {"t": {"enum": ["b"]}, "y": {"type": "string"}}, "required": ["t"], "additionalProperties": False},
]}


@pytest.mark.parametrize("instance", [{"t": "a"}, {"t": "a", "x": 1}, {"t": "b", "y": "s"}, {"t": "a", "y": "s"},
                                      {"t": "c"}, {}, {"t": "b", "x": 1}, {"x": 1}])
def test_one_of_branches_are_judged_within_their_object(grammars, instance):
    """Each branch alone also admits every non-object, so the branches overlap and the exact rewrite needed
    the complement of ``additionalProperties`` (refused). Within ``type: object`` they are disjoint (each
    requires its own tag): a plain union (SchemaStore: 17 ``abc-*`` schemas, ``expo``, ``kustomization``)."""
    from tests.support.grammar import accepts, renderings
    from typedlm.grammar.schema import prepare_schema

    compiled, _ = grammars.compile(make_constraint(json_schema=TAGGED, strict=False, any_whitespace=False))
    core = prepare_schema(TAGGED)
    assert len(core["anyOf"]) == 2
    valid = jsonschema.Draft202012Validator(TAGGED).is_valid(instance)
    assert any(accepts(compiled, t) for t in renderings(instance, core)) == valid


ARRAYS = {"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "array", "items": {"type": "integer"}}]}


@pytest.mark.parametrize("instance", [[], ["a"], [1], [1, "a"], ["a", 1, 2], [1.5], "x"])
def test_one_of_arrays_by_item_type(grammars, instance):
    """Both branches take ``[]``, so each is met with the complement of the other's ``items``: an array with
    some item outside them (``contains`` the complement; refused before, SchemaStore: packer, traefik)."""
    from tests.support.grammar import accepts, renderings
    from typedlm.grammar.schema import prepare_schema

    compiled, _ = grammars.compile(make_constraint(json_schema=ARRAYS, strict=False, any_whitespace=False))
    valid = jsonschema.Draft202012Validator(ARRAYS).is_valid(instance)
    assert any(accepts(compiled, t) for t in renderings(instance, prepare_schema(ARRAYS))) == valid


SORT_OPTIONS = {"oneOf": [  # SchemaStore kustomization.json, sortOptions
    {"type": "object", "properties": {"order": {"const": "legacy"}, "legacy": {"type": "object"}},
     "additionalProperties": False},
    {"type": "object", "properties": {"order": {"const": "fifo"}}, "additionalProperties": False}]}


@pytest.mark.parametrize("instance", [{}, {"order": "legacy"}, {"order": "fifo"}, {"legacy": {}}, {"x": 1},
                                      {"order": "fifo", "legacy": {}}, {"order": "legacy", "legacy": {}}])
def test_complement_of_additional_properties_within_a_closed_object(grammars, instance):
    """``{}`` matches both branches. ``¬additionalProperties: false`` (some key the branch does not list) is
    no object branch in general, but within the other branch, whose keys are listed, it is one branch per
    listed key the first lacks (``legacy`` present)."""
    from tests.support.grammar import accepts, renderings
    from typedlm.grammar.schema import prepare_schema

    compiled, _ = grammars.compile(make_constraint(json_schema=SORT_OPTIONS, strict=False, any_whitespace=False))
    valid = jsonschema.Draft202012Validator(SORT_OPTIONS).is_valid(instance)
    assert any(accepts(compiled, t) for t in renderings(instance, prepare_schema(SORT_OPTIONS))) == valid


def test_one_of_told_apart_by_a_required_tag_compiles_as_any_of():
    """Branches that both require 'kind' with disjoint const/enum values exclude each other: exact as anyOf
    even where intersecting them would be refused (two patternProperties)."""
    from typedlm.grammar.schema import find_refusals

    def branch(tag, pat):
        return {"type": "object", "required": ["kind"], "properties": {"kind": tag},
                "patternProperties": {pat: {"type": "integer"}}}

    told = {"oneOf": [branch({"const": "a"}, "^x"), branch({"enum": ["b", "c"]}, "^y")],
            "discriminator": {"propertyName": "kind"}}
    assert find_refusals(told) == []
    overlapping = {"oneOf": [branch({"const": "a"}, "^x"), branch({"enum": ["a", "c"]}, "^y")]}
    assert [r.keyword for r in find_refusals(overlapping)] in (["oneOf"], ["patternProperties"])
    untyped = {"oneOf": [{k: v for k, v in branch({"const": "a"}, "^x").items() if k != "type"},
                         branch({"const": "b"}, "^y")]}
    # a non-object matches only the untyped branch, an object only the one its tag names: exclusive
    assert find_refusals(untyped) == []
