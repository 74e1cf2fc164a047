"""Differential fuzzing of the schema rewrites: compositions against jsonschema.

hypothesis builds schemas from ``allOf``/``anyOf``/``oneOf``/``not``/``if``-``then``-``else``/``$ref``
over small object, array and scalar schemas (the discriminated-union idiom, ``contains`` counts,
``patternProperties``/``propertyNames``, ``multipleOf`` among them) plus candidate
instances; an instance the grammar accepts but jsonschema rejects fails the test. Fixed seed
(derandomized) in CI; ``TYPEDLM_FUZZ_EXAMPLES=N`` runs more, and ``TYPEDLM_FUZZ_REPORT=path`` writes
the counts (committed: bench/results/schema-compositions-fuzz-cpu.json).
"""

import json
import os

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from typedlm.errors import EmptySchemaError, TypedLMError
from typedlm.grammar.spec import make_constraint

EXAMPLES = int(os.environ.get("TYPEDLM_FUZZ_EXAMPLES", "150"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
STATS = {"examples": 0, "compiled": 0, "refused_or_empty": 0, "instances": 0, "valid": 0,
         "accepted": 0, "false_positives": 0, "false_negatives": 0}

KEYS = ["kind", "x", "y", "xy"]
PATTERNS = ["^x", "y", "k.n", "^[a-x]+$"]
KINDS = ["a", "b", "c"]
VALUES = [None, True, 0, 1, 2, -1, 2.5, "", "a", "b", "ab", "P1D", "2024-02-29", "x1"]
SCALAR = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["null", "boolean", "integer", "number", "string"])}),
    st.fixed_dictionaries({"const": st.sampled_from(VALUES)}),
    st.fixed_dictionaries({"enum": st.lists(st.sampled_from(VALUES), min_size=1, max_size=3, unique=True)}),
    st.fixed_dictionaries({"type": st.just("integer"), "minimum": st.integers(-1, 2)}),
    st.fixed_dictionaries({"maximum": st.integers(-1, 2)}),
    st.fixed_dictionaries({"type": st.just("string"), "maxLength": st.integers(0, 2)}),
    st.fixed_dictionaries({"type": st.just("string"), "format": st.sampled_from(["date", "duration"])}),
    st.fixed_dictionaries({"multipleOf": st.integers(2, 3)}),
    st.sampled_from([True, False, {}]),
)
# keywords with a grammar of typedlm's own (grammar/schema/ebnf.py): contains counters, key classes
ARRAY = st.fixed_dictionaries(
    {"contains": SCALAR},
    optional={"type": st.just("array"), "minContains": st.integers(0, 2), "maxContains": st.integers(0, 2),
              "items": SCALAR, "prefixItems": st.lists(SCALAR, max_size=1), "maxItems": st.integers(0, 3),
              "unevaluatedItems": st.sampled_from([False, {"type": "integer"}])})
KEYED = st.fixed_dictionaries(
    {"patternProperties": st.dictionaries(st.sampled_from(PATTERNS), SCALAR, max_size=2)},
    optional={"properties": st.dictionaries(st.sampled_from(KEYS), SCALAR, max_size=2),
              "additionalProperties": st.sampled_from([False, {"type": "integer"}]),
              "required": st.lists(st.sampled_from(KEYS), max_size=1),
              "propertyNames": st.sampled_from([{"maxLength": 1}, {"pattern": "^[a-x]"}, {"enum": ["x", "kind"]}])})
OBJECT = st.fixed_dictionaries(
    {"properties": st.dictionaries(st.sampled_from(KEYS), SCALAR, max_size=3)},
    optional={"type": st.just("object"),
              "required": st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
              "additionalProperties": st.sampled_from([False, {"type": "integer"}, True])})


def _discriminated(kinds_and_thens):
    """The discriminated-union idiom: an allOf of if/then keyed on a const property, each then closing
    the object with additionalProperties: false."""
    kinds = [k for k, _ in kinds_and_thens]
    return {"type": "object", "properties": {"kind": {"enum": kinds}}, "required": ["kind"],
            "allOf": [{"if": {"properties": {"kind": {"const": k}}, "required": ["kind"]},
                       "then": {"properties": {"kind": {}, **then.get("properties", {})},
                                "required": then.get("required", []), "additionalProperties": False}}
                      for k, then in kinds_and_thens]}


DISCRIMINATED = st.lists(st.tuples(st.sampled_from(KINDS), OBJECT), min_size=1, max_size=3,
                         unique_by=lambda t: t[0]).map(_discriminated)
LEAF = st.one_of(SCALAR, OBJECT, DISCRIMINATED, ARRAY, KEYED)


def _compose(children):
    return st.one_of(
        st.builds(lambda xs: {"allOf": xs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda x: {"not": x}, children),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, children, children, children),
        st.builds(lambda i, t: {"if": i, "then": t}, children, children),
        st.builds(lambda base, extra: {**base, "allOf": [extra]} if isinstance(base, dict) else {"allOf": [extra]},
                  OBJECT, children),
    )


def _with_ref(schema, target):
    """Put ``target`` under $defs and reach it through a $ref beside the schema's own keywords."""
    if not isinstance(schema, dict):
        schema = {"allOf": [schema]}
    return {**schema, "$defs": {"t": target}, "$ref": "#/$defs/t"}


SCHEMAS = st.one_of(
    DISCRIMINATED,
    st.recursive(LEAF, _compose, max_leaves=5),
    st.builds(_with_ref, st.recursive(LEAF, _compose, max_leaves=3), LEAF),
)
INSTANCE_VALUES = st.sampled_from(VALUES)
INSTANCES = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), INSTANCE_VALUES, max_size=3),
    st.builds(lambda k, d: {"kind": k, **d}, st.sampled_from(KINDS),
              st.dictionaries(st.sampled_from(KEYS[1:]), INSTANCE_VALUES, max_size=2)),
    INSTANCE_VALUES,
    st.lists(INSTANCE_VALUES, max_size=4),
)


@pytest.fixture(scope="module", params=["xgrammar", "auto"])
def grammars(request):
    """Each grammar engine (``auto``: llguidance wherever it takes the core form)."""
    from tests.support.grammar import default_grammars

    yield default_grammars(engine=request.param)
    if os.environ.get("TYPEDLM_FUZZ_REPORT"):
        with open(os.environ["TYPEDLM_FUZZ_REPORT"], "w", encoding="utf-8") as f:
            json.dump({"test": "tests/grammar/schema/test_compositions.py", "seed": "derandomized",
                       **STATS}, f, indent=1)
            f.write("\n")


def _validator(schema):
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def _check(grammars, schema, instances):
    from tests.support.grammar import accepts, renderings
    from typedlm.grammar.schema import prepare_schema

    STATS["examples"] += 1
    try:
        compiled, _ = grammars.compile(make_constraint(json_schema=schema, strict=False, any_whitespace=False))
        core = prepare_schema(schema)
    except EmptySchemaError:  # proven empty: every instance must be invalid (else a false negative)
        STATS["refused_or_empty"] += 1
        STATS["false_negatives"] += sum(_validator(schema).is_valid(i) for i in instances)
        return
    except TypedLMError:
        STATS["refused_or_empty"] += 1
        return
    STATS["compiled"] += 1
    validator = _validator(schema)
    for inst in instances:
        valid = validator.is_valid(inst)
        accepted = any(accepts(compiled, text) for text in renderings(inst, core))
        STATS["instances"] += 1
        STATS["valid"] += valid
        STATS["accepted"] += accepted
        STATS["false_negatives"] += valid and not accepted
        if accepted and not valid:
            STATS["false_positives"] += 1
            raise AssertionError(f"grammar accepts {json.dumps(inst)} but {json.dumps(schema)} forbids it")


@SETTINGS
@given(schema=SCHEMAS, instances=st.lists(INSTANCES, min_size=10, max_size=10))
def test_compositions_are_sound(grammars, schema, instances):
    _check(grammars, schema, instances)


DISCRIMINATED_UNION = {
    "type": "object", "properties": {"kind": {"enum": ["a", "b"]}}, "required": ["kind"],
    "allOf": [
        {"if": {"properties": {"kind": {"const": "a"}}},
         "then": {"properties": {"kind": {}, "x": {"type": "integer"}}, "required": ["x"],
                  "additionalProperties": False}},
        {"if": {"properties": {"kind": {"const": "b"}}},
         "then": {"properties": {"kind": {}, "d": {"type": "string", "format": "duration"}},
                  "additionalProperties": False}},
    ]}


@pytest.mark.parametrize("instance,valid", [
    ({"kind": "a", "x": 1}, True),
    ({"kind": "b", "d": "P1D"}, True),
    ({"kind": "a", "x": 1, "y": 2}, False),  # an extra property
    ({"kind": "a", "x": "s"}, False),  # a wrong type
    ({"kind": "a"}, False),  # a missing required property
    ({"kind": "b", "d": "P1"}, False),  # a bad duration
    ({"kind": "b", "z": 1}, False),
])
def test_discriminated_union_regression(grammars, instance, valid):
    """Found on a schema-store schema: the complement of each ``if`` (``kind`` present and not the
    const) was intersected with ``kind``'s enum through a jsonschema probe that *searched* the
    core-form complement pattern ``(...){0,1}`` (matching every string), so a third branch
    ``{kind: enum}`` without the ``then`` parts let everything through."""
    from tests.support.grammar import accepts, renderings
    from typedlm.grammar.schema import prepare_schema

    schema = DISCRIMINATED_UNION
    assert jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).is_valid(instance) \
        == valid
    compiled, _ = grammars.compile(make_constraint(json_schema=schema, strict=False, any_whitespace=False))
    core = prepare_schema(schema)
    assert any(accepts(compiled, t) for t in renderings(instance, core)) == valid
    assert len(core["anyOf"]) == 2  # one branch per kind; nothing else
