"""Prior correction, calibration bundles, dependency waves and the semantics record (tiny random model)."""

import math
import random

import pytest

from typedlm.decide.calibrate import bundle as cal
from typedlm.decide.calibrate import fit
from typedlm.decide.calibrate import rulefit
from typedlm.decide import prior as pr
from typedlm.decide.api import decide, decide_many, plan_for
from typedlm.decide.scoring import score_prompts
from typedlm.decide.prompt import PROMPT_VERSION, content_free_ids, prompt_ids
from typedlm.decide.result import FIELD_KEYS
from typedlm.decide.schema import DecisionSchema
from typedlm.errors import TypedLMError

SCHEMA = {"description": "Triage.", "fields": {
    "topic": {"type": "enum", "description": "Topic?", "choices": ["billing", "login", "other"]},
    "spam": {"type": "boolean", "description": "Spam?"},
    "tags": {"type": "multi", "description": "Tags?", "choices": ["refund", "bug"]}}}
CTXS = ["I was charged twice, refund me.", "I cannot log in since the update.", "Win a free cruise now!!!"]


def _norm(d):
    t = sum(d.values())
    return {k: v / t for k, v in d.items()}


def test_neutral_prior_divides_the_content_free_prior_and_is_cached(tiny):
    tiny.caches.priors = type(tiny.caches.priors)(256)
    raw = decide(SCHEMA, CTXS[0], engine=tiny, prior="none")
    h0, m0 = pr.stats["hits"], pr.stats["misses"]
    d = decide(SCHEMA, CTXS[0], engine=tiny, prior="neutral")
    assert (pr.stats["hits"], pr.stats["misses"]) == (h0, m0 + 1)
    d2 = decide(SCHEMA, CTXS[1], engine=tiny, prior="neutral")
    assert (pr.stats["hits"], pr.stats["misses"]) == (h0 + 1, m0 + 1)  # same (model, plan, prompt version)
    decide({**SCHEMA, "description": "Other."}, CTXS[1], engine=tiny, prior="neutral")
    assert pr.stats["misses"] == m0 + 2  # another plan: another prior
    # the reference: mean probability over the content-free contexts, divided out
    plan = plan_for(SCHEMA, tiny)
    cf = score_prompts(tiny, plan, [content_free_ids(tiny, plan, c) for c in pr.CONTENT_FREE], "packed",
                        1 << 30, None)
    qi = [i for i, q in enumerate(plan.questions) if q.field == "topic"][0]
    probs = [[math.exp(x) for x in s.scores[qi].log_scores] for s in cf]
    q = [sum(col) / len(col) for col in zip(*probs)]
    want = _norm({k: raw.fields["topic"].probabilities[k] / qk for k, qk in zip(plan.questions[qi].keys, q)})
    assert d.fields["topic"].probabilities == pytest.approx(want, rel=1e-6)
    assert d.fields["topic"].prior == "neutral" and raw.fields["topic"].prior == "none"
    assert d.fields["spam"].probabilities != pytest.approx(raw.fields["spam"].probabilities, abs=1e-4)
    assert d2.fields["tags"].prior == "neutral"


def test_batch_prior_uses_the_batch(tiny):
    raw = decide_many(SCHEMA, CTXS, engine=tiny, prior="none")
    got = decide_many(SCHEMA, CTXS, engine=tiny, prior="batch")
    keys = list(raw[0].fields["topic"].probabilities)
    q = {k: sum(r.fields["topic"].probabilities[k] for r in raw) / len(raw) for k in keys}
    for r, g in zip(raw, got):
        want = _norm({k: r.fields["topic"].probabilities[k] / q[k] for k in keys})
        assert g.fields["topic"].probabilities == pytest.approx(want, rel=1e-6)
        assert g.fields["topic"].prior == "batch"
    # batch-corrected P(yes) averages out: the mean corrected odds are balanced around the batch prior
    with pytest.raises(TypedLMError, match="at least 2 contexts"):
        decide(SCHEMA, CTXS[0], engine=tiny, prior="batch")
    with pytest.raises(TypedLMError, match="prior: Input should be"):
        decide(SCHEMA, CTXS[0], engine=tiny, prior="uniform")


def _bundle(tiny, **over):
    base = dict(model="tiny", model_hash=pr.fingerprint(tiny), prompt_version=PROMPT_VERSION, scoring="labels",
                fields={"topic": cal.FieldCalibration(type="enum", kind="temperature", temperature=2.0, prior="none"),
                        "tags": cal.FieldCalibration(type="multi", kind="logistic", a=0.5, b=-1.0, prior="none",
                                                     set_rule="count")})
    base.update(over)
    return cal.CalibrationBundle(**base)


def test_calibration_bundle_applies_and_records(tiny, tmp_path):
    raw = decide(SCHEMA, CTXS[0], engine=tiny, prior="none")
    b = _bundle(tiny)
    path = tmp_path / "b.json"
    path.write_text(b.model_dump_json())
    d = decide(SCHEMA, CTXS[0], engine=tiny, prior="none", calibration=str(path))
    logs = raw.fields["topic"].log_scores
    want = _norm({k: math.exp(v / 2.0) for k, v in logs.items()})
    assert d.fields["topic"].probabilities == pytest.approx(want, rel=1e-6)
    ly = raw.fields["tags"].log_scores["bug"]
    z = 0.5 * (ly - math.log1p(-math.exp(ly))) - 1.0
    assert d.fields["tags"].probabilities["bug"] == pytest.approx(1 / (1 + math.exp(-z)), rel=1e-6)
    rec = d.fields["topic"].to_dict()
    assert rec["calibrator"] == b.id and rec["temperature"] == 2.0 and rec["score_source"] == "batched"
    assert d.fields["spam"].calibrator is None  # not in the bundle: left as scored
    assert d.fields["spam"].probabilities == pytest.approx(raw.fields["spam"].probabilities)
    assert b.id in d.summary()


@pytest.mark.parametrize("over, what", [
    ({"model_hash": "0" * 16}, "model"), ({"prompt_version": "0"}, "prompt version"),
    ({"scoring": "slots"}, "scoring mode"),
    ({"fields": {"tags": cal.FieldCalibration(type="multi", kind="logistic", a=1, b=0, set_rule="cardinality",
                                              cardinality=[0.0, 0.0])}}, "set-size prior over 0..1"),
    ({"fields": {"nope": cal.FieldCalibration(type="enum", kind="temperature", temperature=1.0)}}, "does not have"),
    ({"fields": {"topic": cal.FieldCalibration(type="multi", kind="logistic", a=1, b=0, set_rule="count")}},
     "the schema's is enum"),
])
def test_calibration_bundle_mismatch_is_refused(tiny, over, what):
    with pytest.raises(cal.CalibrationMismatch, match=what):
        decide(SCHEMA, CTXS[0], engine=tiny, prior="none", calibration=_bundle(tiny, **over))


def _synthetic(n, seed, bias=(0.0, 0.0, 0.0), over=3.0):
    """Examples whose true log-odds are ``true``; the model reports ``over`` x them plus a per-class ``bias``
    (a model that prefers some choices regardless of the context), and a multi option with logit 2 zt."""
    rng = random.Random(seed)
    ex = []
    for _ in range(n):
        true = [rng.gauss(0, 1.5) for _ in range(3)]
        p = [math.exp(x) for x in true]
        gold = rng.choices(range(3), [x / sum(p) for x in p])[0]
        shown = [over * x + b for x, b in zip(true, bias)]
        m = max(shown)
        z = m + math.log(sum(math.exp(x - m) for x in shown))
        zt = rng.gauss(0, 2)
        y = rng.random() < 1 / (1 + math.exp(-(zt - 0.5)))
        ly = -math.log1p(math.exp(-(2 * zt)))  # multi: log P(yes) with logit 2 zt (a = 0.5, b = -0.5)
        ex.append(fit.Example(scores={"f": {k: x - z for k, x in zip("abc", shown)}, "m": {"o": ly}},
                              gold={"f": "abc"[gold], "m": ["o"] if y else []}))
    return ex


def _fit(ex, types, kinds=cal.SCALAR_KINDS):
    """Rules chosen by cross-validation (prior none only): (fields, scalar fields' candidate tables, chosen rows)."""
    fields, recs = rulefit.choose_rules(types, {"f": 3, "m": 1}, {"none": ex}, kinds=kinds)
    return fields, {n: r["candidates"] for n, r in recs.items() if types[n] != "multi"}, \
        {n: r["chosen"] for n, r in recs.items()}


def test_fitting_recovers_temperature_and_logistic_and_lowers_ece():
    ex = _synthetic(600, 0)
    types = {"f": "enum", "m": "multi"}
    fields, tables, _ = _fit(ex, types, kinds=("temperature",))
    assert fields["f"].kind == "temperature" and fields["f"].temperature == pytest.approx(3.0, rel=0.2)
    assert fields["m"].kind == "logistic"
    assert fields["m"].a == pytest.approx(0.5, abs=0.15) and fields["m"].b == pytest.approx(-0.5, abs=0.25)
    before, after = fit.evaluate(ex, types, None), fit.evaluate(ex, types, fields)
    assert after["ece"] < before["ece"] and after["fields"]["f"]["ece"] < 0.05 < before["fields"]["f"]["ece"]
    assert [r["kind"] for r in tables["f"]] == ["temperature"]


def test_per_class_bias_needs_more_than_a_temperature():
    """A model biased towards one choice: no temperature fixes it (it cannot move the argmax); the
    cross-validated choice picks a calibrator with a bias per choice, and held-out NLL and ECE drop."""
    bias = (2.5, 0.0, -1.0)
    train, test = _synthetic(400, 1, bias), _synthetic(1000, 2, bias)
    types = {"f": "enum"}
    temp, _, _ = _fit(train, types, kinds=("temperature",))
    auto, tables, chosen = _fit(train, types)
    assert auto["f"].kind in ("bias", "vector", "matrix")
    assert {r["kind"] for r in tables["f"]} == {*cal.SCALAR_KINDS, fit.CLASS_PRIOR}
    assert len(tables["f"]) == 2 + 3 * len(fit.L2_GRID)
    best_acc = max(r["cv_acc"] for r in tables["f"])
    assert chosen["f"]["kind"] == auto["f"].kind and chosen["f"] in tables["f"]
    assert chosen["f"]["cv_acc"] >= best_acc - math.sqrt(best_acc * (1 - best_acc) / 400) - 1e-12
    tt, ta = fit.evaluate(test, types, temp)["fields"]["f"], fit.evaluate(test, types, auto)["fields"]["f"]
    assert ta["nll"] < tt["nll"] - 0.02 and ta["ece"] < tt["ece"] and ta["ece"] < 0.05
    for kind in ("bias", "vector", "matrix"):  # each kind alone also removes the bias
        f1, _, _ = _fit(train, types, kinds=(kind,))
        assert f1["f"].kind == kind and fit.evaluate(test, types, f1)["fields"]["f"]["nll"] < tt["nll"] - 0.02


def test_bias_kind_on_inverted_scores_keeps_a_positive_temperature():
    ex = _synthetic(300, 4, over=-1.0)  # the scores point the wrong way: no positive temperature fits them
    f, tables, _ = _fit(ex, {"f": "enum"}, kinds=("bias",))
    assert f["f"].kind == "bias" and f["f"].temperature == fit.T_MAX and len(tables["f"]) == len(fit.L2_GRID)


@pytest.mark.parametrize("kind, params, want", [
    ("bias", {"temperature": 2.0, "bias": [0.5, 0.0, -0.5]}, lambda x: [v / 2.0 + b for v, b in zip(x, [0.5, 0, -0.5])]),
    ("vector", {"scale": [1.0, 0.5, 2.0], "bias": [0.0, 1.0, 0.0]}, lambda x: [x[0], 0.5 * x[1] + 1, 2 * x[2]]),
    ("matrix", {"weights": [[1, 0, 0], [0.5, 0.5, 0], [0, 0, -1]], "bias": [0, 0, 0.3]},
     lambda x: [x[0], 0.5 * x[0] + 0.5 * x[1], -x[2] + 0.3]),
])
def test_affine_kinds_apply_through_decide(tiny, kind, params, want):
    raw = decide(SCHEMA, CTXS[0], engine=tiny, prior="none")
    keys = list(raw.fields["topic"].probabilities)
    fc = cal.FieldCalibration(type="enum", kind=kind, choices=keys, prior="none", **params)
    d = decide(SCHEMA, CTXS[0], engine=tiny, prior="none", calibration=_bundle(tiny, fields={"topic": fc}))
    z = want([raw.fields["topic"].log_scores[k] for k in keys])
    assert d.fields["topic"].probabilities == pytest.approx(_norm(dict(zip(keys, map(math.exp, z)))), rel=1e-6)
    assert d.fields["topic"].temperature == params.get("temperature")
    wrong = cal.FieldCalibration(type="enum", kind=kind, choices=keys[:-1] + ["weather"], **params)
    with pytest.raises(cal.CalibrationMismatch, match="fitted on the candidates"):
        decide(SCHEMA, CTXS[0], engine=tiny, prior="none", calibration=_bundle(tiny, fields={"topic": wrong}))


@pytest.mark.parametrize("spec, what", [
    ({"type": "enum", "kind": "bias", "temperature": 1.0}, "takes choices, temperature, bias"),
    ({"type": "enum", "kind": "matrix", "choices": ["a", "b"], "weights": [[1, 0]], "bias": [0, 0]}, "one entry"),
    ({"type": "multi", "kind": "temperature", "temperature": 1.0}, "does not calibrate a multi"),
    ({"type": "enum", "kind": "logistic", "a": 1.0, "b": 0.0}, "does not calibrate a enum"),
    ({"type": "enum", "kind": "temperature", "temperature": -1.0}, "must be > 0"),
])
def test_field_calibration_is_typed(spec, what):
    with pytest.raises(ValueError, match=what):
        cal.FieldCalibration(**spec)


def test_ece_floor_is_the_estimators_own_bias():
    rng = random.Random(3)
    conf = [rng.uniform(0.34, 0.9) for _ in range(200)]
    hits = [rng.random() < c for c in conf]  # perfectly calibrated
    floor = cal.ece_floor(conf)
    assert 0.03 < floor < 0.12 and abs(cal.ece(conf, hits) - floor) < 0.05
    assert cal.ece_floor(conf * 25) < floor / 3  # 25x the cases: the floor shrinks by about 5x


def test_dependency_waves(tiny):
    spec = {"fields": {
        "topic": {"type": "enum", "description": "Topic?", "choices": ["billing", "login", "other"]},
        "sub": {"type": "enum", "description": "Sub-topic?", "choices": ["card", "password", "none"],
                "depends_on": "topic"},
        "urgent": {"type": "boolean", "description": "Urgent?", "depends_on": ["sub"]},
        "spam": {"type": "boolean", "description": "Spam?"}}}
    ds = decide_many(spec, CTXS[:2], engine=tiny, prior="none")
    from typedlm.decide.constraints import depends

    assert depends.waves(DecisionSchema.from_dict(spec)) == [("topic", "spam"), ("sub",), ("urgent",)]
    flat = decide({"fields": {k: {kk: vv for kk, vv in v.items() if kk != "depends_on"}
                              for k, v in spec["fields"].items()}}, CTXS[0], engine=tiny, prior="none")
    d = ds[0]
    assert d.usage["waves"] == 3
    assert [d.fields[n].score_source for n in ("topic", "spam", "sub", "urgent")] == \
        ["batched", "batched", "dependency", "dependency"]
    # wave 0 is the same scoring as without dependencies; the child is scored on the prompt with the parent given
    assert d.fields["topic"].probabilities == pytest.approx(flat.fields["topic"].probabilities, rel=1e-5)
    sub_plan = plan_for(DecisionSchema.from_dict(spec).subset(("sub",)), tiny)
    given = depends.given_text(DecisionSchema.from_dict(spec), {"topic": d.fields["topic"].value}, ("sub",))
    assert given == f'Given: "topic": "{d.fields["topic"].value}".'
    ref = score_prompts(tiny, sub_plan, [prompt_ids(tiny, sub_plan, CTXS[0], given)], "packed", 1 << 30, None)[0]
    want = _norm({k: math.exp(v) for k, v in zip(sub_plan.questions[0].keys, ref.scores[0].log_scores)})
    assert d.fields["sub"].probabilities == pytest.approx(want, rel=1e-5)
    assert d.fields["sub"].probabilities != pytest.approx(flat.fields["sub"].probabilities, rel=1e-3)
    single = decide(spec, CTXS[1], engine=tiny, prior="none")
    assert single.fields["urgent"].probabilities == pytest.approx(ds[1].fields["urgent"].probabilities, rel=1e-5)


def test_record_keys_and_summary(tiny):
    d = decide(SCHEMA, CTXS[0], engine=tiny)  # the default prior is recorded, resolved per field type ("auto")
    assert pr.DEFAULT_PRIOR == "auto"
    for name, f in d.to_dict()["fields"].items():
        assert tuple(f) == FIELD_KEYS
        assert (f["score_source"], f["prior"], f["calibrator"], f["temperature"], f["constraint_changed"]) == \
            ("batched", pr.AUTO[SCHEMA["fields"][name]["type"]], None, None, False)
    assert {f: x["prior"] for f, x in d.to_dict()["fields"].items()} == {"topic": "neutral", "spam": "none",
                                                                       "tags": "neutral"}
    s = decide(SCHEMA, CTXS[0], engine=tiny, prior="none").to_dict()["summary"]
    assert s.count(";") == len(d.fields) - 1 and "topic=" in s and "(batched)" in s
    assert "prior neutral" in decide(SCHEMA, CTXS[0], engine=tiny, prior="neutral").summary()
