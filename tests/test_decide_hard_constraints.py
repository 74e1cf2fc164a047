"""Hard constraints: schema validation, the exact solver against brute force, and decide end to end."""

import itertools
import math
from typing import Annotated, ClassVar, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from typedlm.decide import constraints as C
from typedlm.decide import decide, decide_many
from typedlm.decide.schema import DecisionSchema, SchemaError


# -- brute force reference ---------------------------------------------------------------------------
def brute_force(scalars, multis, cross):
    doms = [[(v.name, x) for x in v.values] for v in scalars]
    doms += [[(m.name, [o for o, s in zip(m.options, bits) if s]) for bits in itertools.product((0, 1), repeat=len(m.options))]
             for m in multis]
    best, arg = -math.inf, None
    for combo in itertools.product(*doms):
        a = dict(combo)
        if not C.satisfied(multis, cross, a):
            continue
        sc = C.score(scalars, multis, a)
        if sc > best:
            best, arg = sc, a
    return best, arg


@st.composite
def problems(draw):
    logp = st.floats(min_value=-6, max_value=0, allow_nan=False)
    scalars, multis = [], []
    for i in range(draw(st.integers(0, 2))):
        n = draw(st.integers(2, 4))
        scalars.append(C.ScalarVar(f"s{i}", [f"v{j}" for j in range(n)], draw(st.lists(logp, min_size=n, max_size=n))))
    for i in range(draw(st.integers(1 if not scalars else 0, 2))):
        n = draw(st.integers(1, 5))
        opts = [f"o{j}" for j in range(n)]
        py = draw(st.lists(st.floats(0.001, 0.999), min_size=n, max_size=n))
        count = draw(st.one_of(st.none(), st.lists(logp, min_size=n + 1, max_size=n + 1)))
        lo = draw(st.integers(0, n))
        hi = draw(st.integers(lo, n))
        ex = tuple(tuple(draw(st.lists(st.sampled_from(opts), min_size=2, max_size=3, unique=True)))
                   for _ in range(draw(st.integers(0, 1)))) if n >= 2 else ()
        rq = tuple((a, tuple(draw(st.lists(st.sampled_from([o for o in opts if o != a]), min_size=1, max_size=2,
                                              unique=True))))
                   for a in draw(st.lists(st.sampled_from(opts), max_size=1, unique=True))) if n >= 2 else ()
        multis.append(C.MultiVar(f"m{i}", opts, [math.log(p) for p in py], [math.log(1 - p) for p in py], count,
                                 lo, hi, ex, rq))
    fields = [(v.name, v.values) for v in scalars] + [(m.name, m.options) for m in multis]
    cross = []
    if len(fields) >= 2:
        for _ in range(draw(st.integers(0, 3))):
            (fa, va), (fb, vb) = draw(st.permutations(fields))[:2]
            a = C.Atom(fa, tuple(draw(st.lists(st.sampled_from(va), min_size=1, max_size=2, unique=True))))
            b = C.Atom(fb, tuple(draw(st.lists(st.sampled_from(vb), min_size=1, max_size=2, unique=True))))
            cross.append(C.Implies(a, b) if draw(st.booleans()) else C.Excludes((a, b)))
    return scalars, multis, cross


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(problems())
def test_solver_matches_brute_force(p):
    scalars, multis, cross = p
    best, arg = brute_force(scalars, multis, cross)
    if arg is None:
        with pytest.raises(C._Infeasible):
            C.solve(scalars, multis, cross)
        return
    got = C.solve(scalars, multis, cross)
    assert C.satisfied(multis, cross, got)
    assert C.score(scalars, multis, got) == pytest.approx(best, abs=1e-9)


def test_solver_is_not_greedy():
    # greedy repair would keep the strongest option a and drop the rest; the optimum drops a instead
    m = C.MultiVar("t", ["a", "b", "c"], [math.log(0.9), math.log(0.8), math.log(0.8)],
                   [math.log(0.1), math.log(0.2), math.log(0.2)], None, 0, 3, (("a", "b"), ("a", "c")), ())
    assert C.solve([], [m], []) == {"t": ["b", "c"]}


# -- schema syntax and validation ---------------------------------------------------------------------
BASE = {"fields": {
    "category": {"type": "enum", "description": "Category?", "choices": ["billing", "technical", "other"]},
    "action": {"type": "enum", "description": "Action?", "choices": ["refund", "invoice", "reset", "none"]},
    "tags": {"type": "multi", "description": "Tags?", "choices": ["a", "b", "c", "d"]},
    "spam": {"type": "boolean", "description": "Spam?"}}}


def with_(fields=None, constraints=None):
    spec = {"fields": {k: dict(v) for k, v in BASE["fields"].items()}}
    for k, v in (fields or {}).items():
        spec["fields"][k].update(v)
    if constraints is not None:
        spec["constraints"] = constraints
    return spec


def test_schema_round_trip():
    spec = with_({"tags": {"max_selected": 2, "exclusive": [["a", "b"]], "requires": {"c": ["d"]}}},
                 [{"if": {"category": "billing"}, "then": {"action": ["refund", "invoice"]}},
                  {"excludes": {"spam": True, "tags": "a"}}])
    s = DecisionSchema.from_dict(spec)
    assert s.constrained
    assert DecisionSchema.from_dict(s.to_dict()).key == s.key
    assert s.to_dict()["constraints"][0] == {"if": {"category": "billing"}, "then": {"action": ["refund", "invoice"]}}
    assert s["tags"].max_selected == 2 and s["tags"].exclusive == (("a", "b"),)
    assert C.constrained_fields(s) == {"category", "action", "tags", "spam"}
    assert not DecisionSchema.from_dict(BASE).constrained


@pytest.mark.parametrize("spec, msg", [
    (with_({"tags": {"max_selected": 5}}), "asks for 5 selected options but the field has 4"),
    (with_({"tags": {"min_selected": 3, "max_selected": 2}}), "'min_selected' 3 > 'max_selected' 2"),
    (with_({"tags": {"exactly": 2, "max_selected": 3}}), "'exactly' 2 contradicts 'max_selected' 3"),
    (with_({"category": {"max_selected": 1}}), "apply to multi fields only"),
    (with_({"tags": {"exclusive": [["a", "zz"]]}}), "'exclusive' names unknown option 'zz'"),
    (with_({"tags": {"requires": {"a": ["a"]}}}), "option 'a' requires itself"),
    (with_(constraints=[{"if": {"nope": "x"}, "then": {"action": "refund"}}]), "unknown field 'nope'"),
    (with_(constraints=[{"if": {"category": "sales"}, "then": {"action": "refund"}}]), "has no choice 'sales'"),
    (with_(constraints=[{"if": {"spam": "yes"}, "then": {"action": "refund"}}]), "takes true or false"),
    (with_(constraints=[{"when": {}}]), "got keys ['when']"),
    (with_({"tags": {"min_selected": 2, "exclusive": [["a", "b", "c"]], "requires": {"d": ["a", "b"]}}}),
     "constraints cannot all hold"),
    (with_(constraints=[{"if": {"category": "billing"}, "then": {"action": "refund"}},
                        {"if": {"category": "billing"}, "then": {"action": "reset"}},
                        {"if": {"category": ["technical", "other"]}, "then": {"action": "none"}},
                        {"excludes": {"action": "none", "spam": False}},
                        {"excludes": {"action": "none", "spam": True}}]), "constraints cannot all hold"),
    (with_({"action": {"depends_on": "category"}, "category": {"depends_on": ["action"]}}), "cycle"),
    (with_({"action": {"depends_on": "nope"}}), "unknown field 'nope'"),
])
def test_bad_constraints_are_refused_naming_them(spec, msg):
    with pytest.raises(SchemaError, match=msg.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        DecisionSchema.from_dict(spec)


def test_unsatisfiable_names_the_minimal_conflict():
    spec = with_(constraints=[{"if": {"category": "billing"}, "then": {"action": "refund"}},
                              {"if": {"category": "billing"}, "then": {"action": "reset"}},
                              {"if": {"category": ["technical", "other"]}, "then": {"action": "none"}},
                              {"excludes": {"action": "none", "spam": False}},
                              {"excludes": {"action": "none", "spam": True}},
                              {"excludes": {"tags": "a", "spam": True}}])
    with pytest.raises(SchemaError) as e:
        DecisionSchema.from_dict(spec)
    msg = str(e.value)
    assert "if category = billing then action = refund" in msg and "tags" not in msg  # the irrelevant one is left out


class Ticket(BaseModel):
    category: Literal["billing", "technical", "other"] = Field(description="Category?")
    action: Literal["refund", "invoice", "reset", "none"] = Field(description="Action?",
                                                                   json_schema_extra={"depends_on": "category"})
    tags: Annotated[list[Literal["a", "b", "c", "d"]], C.MaxSelected(2), C.Exclusive("a", "b")] = Field(
        description="Tags?")
    decision_constraints: ClassVar[list] = [{"if": {"category": "billing"}, "then": {"action": ["refund", "invoice"]}}]


def test_pydantic_markers_and_class_constraints():
    s = DecisionSchema.from_model(Ticket)
    assert s["tags"].max_selected == 2 and s["tags"].exclusive == (("a", "b"),)
    assert s["action"].depends_on == ("category",)
    assert s.constraints == (C.Implies(C.Atom("category", ("billing",)), C.Atom("action", ("refund", "invoice"))),)


# -- end to end on the tiny model ---------------------------------------------------------------------
def test_decide_respects_constraints_and_records_the_change(tiny):
    free = decide(BASE, "I was charged twice for my subscription.", engine=tiny)
    f = free.fields
    # a seeded case: forbid exactly the unconstrained winner of `action` and of `tags`' top option
    cat, act = f["category"].value, f["action"].value
    top_tag = max(f["tags"].probabilities, key=f["tags"].probabilities.get)
    spec = with_({"tags": {"exactly": 1, "requires": {top_tag: [o for o in "abcd" if o != top_tag][:1]}}},
                 [{"if": {"category": cat}, "then": {"action": [a for a in ("refund", "invoice", "reset", "none")
                                                                if a != act]}}])
    d = decide(spec, "I was charged twice for my subscription.", engine=tiny)
    g = d.fields
    assert g["category"].probabilities == pytest.approx(f["category"].probabilities)  # same scores
    assert not (g["category"].value == cat and g["action"].value == act)
    assert len(g["tags"].value) == 1 and g["tags"].value != [top_tag]
    assert g["tags"].constraint_changed and g["tags"].to_dict()["constraint_changed"] is True
    # the joint answer is the best feasible one: brute force over the same probabilities
    sch = DecisionSchema.from_dict(spec)
    scal = [C.ScalarVar(n, list(g[n].probabilities), [math.log(p) for p in g[n].probabilities.values()])
            for n in ("category", "action")]
    t = g["tags"]
    cnt = [math.log(t.count_probabilities[str(k)]) for k in range(5)]
    mv = C.MultiVar("tags", list(t.probabilities), [math.log(p) for p in t.probabilities.values()],
                    [math.log(1 - p) for p in t.probabilities.values()], cnt, 1, 1, (), sch["tags"].requires)
    best, arg = brute_force(scal, [mv], sch.constraints)
    assert {"category": g["category"].value, "action": g["action"].value, "tags": g["tags"].value} == arg
    assert "changed by constraints" in d.summary()
    many = decide_many(spec, ["I was charged twice for my subscription.", "The app crashes on start."], engine=tiny)
    for m in many:
        assert len(m.fields["tags"].value) == 1
        assert m.fields["category"].value != cat or m.fields["action"].value != act
