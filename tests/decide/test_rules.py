"""Per-field decision rules: bundles applied by candidate name (any order, --flip), the cardinality prior,
calibrate never reading the test split, a run that skips every case failing (tiny random model), and the
6-option one-topic bar (real model)."""

import json
import math

import pytest
from typer.testing import CliRunner

from typedlm.cli import app
from typedlm.decide.api import decide, plan_for
from typedlm.decide.calibrate.bundle import CalibrationBundle, FieldCalibration
from typedlm.decide.cardinality import default_prior, fitted
from typedlm.decide.options import DecideOptions
from typedlm.decide.prior import fingerprint
from typedlm.decide.prompt import PROMPT_VERSION
from typedlm.decide.rules import calibrated, rules_for
from typedlm.decide.result import QuestionScore
from typedlm.eval.runner import read_jsonl
from typedlm.eval.tracks import permuted_schema

SCHEMA = {"fields": {"topic": {"type": "enum", "description": "Topic?", "choices": ["sport", "tech", "politics"]},
                     "tags": {"type": "multi", "description": "Tags?", "choices": ["local", "world", "money"]}}}
PERMUTED = {"fields": {"topic": {**SCHEMA["fields"]["topic"], "choices": ["politics", "sport", "tech"]},
                       "tags": {**SCHEMA["fields"]["tags"], "choices": ["money", "local", "world"]}}}
TEXTS = ["The match ended two all.", "A new phone chip was announced.", "Parliament passed the budget.",
         "The striker signed for a world club.", "Voters in the city go to the polls.", "Shares fell on Monday."]
VECTOR = FieldCalibration(type="enum", kind="vector", choices=["sport", "tech", "politics"], scale=[0.5, 1.0, 2.0],
                          bias=[1.0, -0.5, 0.25], prior="none")


def _bundle(engine, **fields):
    return CalibrationBundle(model="tiny", model_hash=fingerprint(engine), prompt_version=PROMPT_VERSION,
                             scoring="labels", fields=fields)


def test_a_bundle_calibrates_each_candidate_by_name_in_any_order(tiny):
    opts = DecideOptions(calibration=_bundle(tiny, topic=VECTOR))
    raw = {"sport": -0.3, "tech": -1.9, "politics": -2.4}
    got = {}
    for schema in (SCHEMA, PERMUTED):
        plan = plan_for(schema, tiny)
        scores = [QuestionScore(tuple(raw[k] for k in q.keys) if q.kind == "scalar" else (-0.7, -0.7), 0.0)
                  for q in plan.questions]
        q = next(i for i, q in enumerate(plan.questions) if q.field == "topic")
        out = calibrated(plan, scores, rules_for(plan, opts))[q]
        got[tuple(plan.questions[q].keys)] = dict(zip(plan.questions[q].keys, out.log_scores))
    (a, first), (b, second) = got.items()
    assert a != b and first == pytest.approx(second, abs=1e-12)
    z = {c: s * raw[c] + bias for c, s, bias in zip(VECTOR.choices, VECTOR.scale, VECTOR.bias)}
    norm = math.log(sum(math.exp(v) for v in z.values()))
    assert first == pytest.approx({c: v - norm for c, v in z.items()}, abs=1e-9)  # each its own (s_c, b_c)


def test_decide_applies_a_bundle_to_a_permuted_schema(tiny):
    bundle = _bundle(tiny, topic=VECTOR)
    raw = decide(PERMUTED, TEXTS[0], engine=tiny, prior="none").fields["topic"].log_scores
    d = decide(PERMUTED, TEXTS[0], engine=tiny, prior="none", calibration=bundle)
    want = dict(zip(VECTOR.choices, VECTOR.log_probs([raw[c] for c in VECTOR.choices])))
    got = d.fields["topic"].probabilities
    assert d.fields["topic"].calibrator == bundle.id
    assert {k: math.log(v) for k, v in got.items()} == pytest.approx(want, abs=1e-6)


def test_a_bundle_with_other_candidates_is_refused(tiny):
    other = VECTOR.model_copy(update={"choices": ["sport", "tech", "weather"]})
    with pytest.raises(Exception, match="was fitted on the candidates"):
        decide(SCHEMA, TEXTS[0], engine=tiny, calibration=_bundle(tiny, topic=other))


def test_default_prior_auto_is_none_for_booleans_and_neutral_otherwise(tiny):
    schema = {"fields": {**SCHEMA["fields"], "urgent": {"type": "boolean", "description": "Urgent?"}}}
    plan = plan_for(schema, tiny)
    assert {n: r.prior for n, r in rules_for(plan, DecideOptions()).items()} == \
        {"topic": "neutral", "tags": "neutral", "urgent": "none"}
    assert {r.prior for r in rules_for(plan, DecideOptions(prior="neutral")).values()} == {"neutral"}
    d = decide(schema, TEXTS[0], engine=tiny)
    assert d.fields["urgent"].prior == "none" and d.fields["topic"].prior == "neutral"


MULTI_VECTOR = FieldCalibration(type="multi", kind="vector", choices=["local", "money", "world"], scale=[1.0, 2.0, 0.5],
                                bias=[0.5, -1.0, 2.0], prior="none", set_rule="threshold")


def test_multi_vector_calibrates_each_option_by_name_in_any_order(tiny):
    opts = DecideOptions(calibration=_bundle(tiny, tags=MULTI_VECTOR))
    raw = {"local": -0.2, "world": -1.5, "money": -0.9}  # log P(yes) per option
    got = []
    for schema in (SCHEMA, PERMUTED):
        plan = plan_for(schema, tiny)
        scores = [QuestionScore((raw[q.option], math.log(-math.expm1(raw[q.option]))), 0.0) if q.kind == "option"
                  else QuestionScore(tuple(-1.0 for _ in q.keys), 0.0) for q in plan.questions]
        out = calibrated(plan, scores, rules_for(plan, opts))
        got.append({q.option: out[i].log_scores[0] for i, q in enumerate(plan.questions) if q.kind == "option"})
    assert got[0] == pytest.approx(got[1], abs=1e-12)
    for o, s, b in zip(MULTI_VECTOR.choices, MULTI_VECTOR.scale, MULTI_VECTOR.bias):
        z = s * (raw[o] - math.log(-math.expm1(raw[o]))) + b
        assert got[0][o] == pytest.approx(-math.log1p(math.exp(-z)), abs=1e-9)
    d = decide(PERMUTED, TEXTS[0], engine=tiny, calibration=_bundle(tiny, tags=MULTI_VECTOR))
    assert d.fields["tags"].calibrator is not None


def test_multi_vector_fit_recovers_option_base_rates_and_wins_cv():
    """Options whose log-odds share one scale but not one offset: the per-option fit finds the offsets, and
    cross-validation prefers it to the pooled logistic (exact sets and option ECE)."""
    import numpy as np

    from typedlm.decide.calibrate.fit import Example
    from typedlm.decide.calibrate.rulefit import choose_field, fit_multi

    rng = np.random.default_rng(0)
    offsets = {"a": 2.0, "b": 0.0, "c": -2.5}
    exs = []
    for _ in range(400):
        z = {o: rng.normal(0, 1.5) for o in offsets}
        gold = [o for o in offsets if rng.random() < 1 / (1 + math.exp(-(z[o] + offsets[o])))]
        exs.append(Example(scores={"t": {o: -math.log1p(math.exp(-v)) for o, v in z.items()}}, gold={"t": gold}))
    fc = fit_multi(exs, "t", 3, "threshold", "none", "vector")
    assert fc.choices == ["a", "b", "c"]
    rel = [b - fc.bias[1] for b in fc.bias]  # offsets against option b (shrunk a little towards the pooled fit)
    assert 1.2 < rel[0] < 2.5 and -3.0 < rel[2] < -1.5
    _fc, rec = choose_field("t", "multi", 3, {"none": exs}, set_rules=("threshold",))
    rows = {r["kind"]: r for r in rec["candidates"]}
    assert rows["vector"]["cv_acc"] > rows["logistic"]["cv_acc"] and rows["vector"]["cv_ece"] < rows["logistic"]["cv_ece"]
    assert rec["chosen"]["kind"] == "vector"


def test_count_rule_calibrates_the_count_question_to_the_gold_sizes(tiny):
    """A count question that always says 'one' while the gold sets hold two: the fitted count map moves the
    size term to two, and decide applies the same map to the count question."""
    from typedlm.decide.calibrate.fit import Example
    from typedlm.decide.calibrate.rulefit import fit_multi

    raw_count = [math.log(p) for p in (0.05, 0.8, 0.1, 0.05)]
    exs = [Example(scores={"tags": {"local": -0.1, "world": -0.2, "money": -3.0}}, gold={"tags": ["local", "world"]},
                   counts={"tags": raw_count}) for _ in range(30)]
    fc = fit_multi(exs, "tags", 3, "count", "none")
    assert fc.count_scale is not None and max(range(4), key=fc.count_log_probs(raw_count).__getitem__) == 2
    plan = plan_for(SCHEMA, tiny)
    scores = [QuestionScore(tuple(raw_count), 0.0) if q.kind == "count" else QuestionScore((-0.7, -0.7), 0.0)
              if q.kind == "option" else QuestionScore(tuple(-1.0 for _ in q.keys), 0.0) for q in plan.questions]
    out = calibrated(plan, scores, rules_for(plan, DecideOptions(calibration=_bundle(tiny, tags=fc))))
    i = next(i for i, q in enumerate(plan.questions) if q.kind == "count")
    assert list(out[i].log_scores) == pytest.approx(fc.count_log_probs(raw_count))
    with pytest.raises(ValueError, match="count_scale"):
        FieldCalibration(**{**fc.model_dump(), "set_rule": "threshold"})


def test_cardinality_prior_default_and_fitted():
    p = [math.exp(x) for x in default_prior(6)]
    assert sum(p) == pytest.approx(1.0) and p[1] > p[2] > p[3] > p[0] and p[1] + p[2] > 0.75
    q = [math.exp(x) for x in fitted([1, 1, 1, 2], 3)]
    assert q == pytest.approx([1 / 8, 4 / 8, 2 / 8, 1 / 8])


@pytest.mark.parametrize("rule", ["threshold", "count", "cardinality"])
def test_set_rules_respect_min_and_max_selected(tiny, rule):
    schema = {"fields": {"tags": {**SCHEMA["fields"]["tags"], "min_selected": 2, "max_selected": 2}}}
    for text in TEXTS[:3]:
        d = decide(schema, text, engine=tiny, set_rule=rule)
        assert len(d.fields["tags"].value) == 2


def _cases_file(path, *, poison_test: bool, with_test: bool = True):
    import random

    rng = random.Random(0)
    lines = []
    for i in range(24):
        split = "calibration" if i < 12 else "test"
        if split == "test" and not with_test:
            continue
        topic = rng.choice(["sport", "tech", "politics"])
        labels = {"topic": topic, "tags": rng.choice([["local"], ["world"], ["money", "local"]])}
        text = f"{rng.choice(TEXTS)} ({i})"
        if split == "test" and poison_test:  # unscoreable context, labels outside the schema
            text, labels = "", {"topic": "weather", "tags": ["nonsense"]}
        lines.append({"id": f"c{i}", "schema": SCHEMA, "context": text, "labels": labels, "split": split})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_calibrate_never_reads_the_test_split(tiny_dir, tmp_path):
    bundles = []
    for name, kw in (("poisoned", {"poison_test": True}), ("only-cal", {"poison_test": False, "with_test": False})):
        out = tmp_path / f"{name}.json"
        r = CliRunner().invoke(app, ["calibrate", "--data", str(_cases_file(tmp_path / f"{name}.jsonl", **kw)),
                                     "--model", str(tiny_dir), "--out", str(out), "--quiet"])
        assert r.exit_code == 0, r.output
        bundles.append(CalibrationBundle.model_validate_json(out.read_text()))
    assert bundles[0].id == bundles[1].id and bundles[0].fit["n_fit"] == 12


def test_eval_with_a_bundle_and_flip_decides_every_case(tiny_dir, tmp_path):
    data = _cases_file(tmp_path / "cases.jsonl", poison_test=False)
    bundle = tmp_path / "b.json"
    r = CliRunner().invoke(app, ["calibrate", "--data", str(data), "--model", str(tiny_dir), "--out", str(bundle),
                                 "--quiet"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["eval", "--data", str(data), "--track", "parallel", "--modes", "labels", "--model",
                                 str(tiny_dir), "--calibration", str(bundle), "--flip", "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    journal = read_jsonl(out / "journal.jsonl")
    assert len(journal) == 12 and all(e["status"] == "done" for e in journal)
    rows = read_jsonl(out / "predictions.jsonl")
    flipped = [x for x in rows if x["permutation"] is not None]
    assert len(flipped) == 24 and all(x["record"]["calibrator"] for x in flipped)
    for x in flipped:  # the permuted decision really saw the permuted order
        assert x["permutation"] == permuted_schema(SCHEMA, x["case_id"])[1][x["field"]]


def test_a_run_that_skips_every_case_exits_non_zero(tiny_dir, tmp_path):
    lines = [{"id": f"c{i}", "schema": SCHEMA, "context": TEXTS[i], "split": "test",
              "labels": {"topic": "weather", "tags": []}} for i in range(3)]
    data = tmp_path / "bad.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = CliRunner().invoke(app, ["eval", "--data", str(data), "--track", "parallel", "--modes", "labels", "--model",
                                 str(tiny_dir), "--out", str(tmp_path / "run"), "--quiet"])
    assert r.exit_code == 1, r.output
    said = [ln for ln in r.stderr.splitlines() if ln.strip() and "Loading weights" not in ln]  # model-load bars
    assert said[0].startswith("error: every case was skipped (3 of 3)") and "'weather'" in said[0]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "failed"


ONE_TOPIC = {"description": "Classify a short text.",
             "fields": {"topics": {"type": "multi", "description": "Which topics does the text discuss?",
                                   "choices": ["sport", "politics", "technology", "health", "weather", "food"]}}}
ONE_TOPIC_TEXTS = [
    "The home team won the football final 3-1 after a late goal from their young striker.",
    "Parliament voted on the new budget today; the opposition leader criticised the finance minister.",
    "The company unveiled a faster smartphone chip and a new operating system update for its laptops.",
    "Doctors recommend regular exercise and a balanced diet to lower the risk of heart disease.",
    "Heavy rain and strong winds are expected across the north tomorrow, with snow on high ground.",
]


@pytest.mark.real_model
def test_one_topic_texts_select_few_options_with_defaults(real):
    sizes = [len(decide(ONE_TOPIC, t, engine=real).fields["topics"].value) for t in ONE_TOPIC_TEXTS]
    assert sum(sizes) / len(sizes) <= 1.5, sizes


def test_rule_ties_on_accuracy_go_to_the_lowest_cv_ece():
    from typedlm.decide.calibrate.rulefit import pick

    rows = [{"prior": "neutral", "kind": "matrix", "cv_acc": 0.50, "cv_nll": 1.00, "cv_ece": 0.12, "n": 120},
            {"prior": "none", "kind": "temperature", "cv_acc": 0.47, "cv_nll": 1.10, "cv_ece": 0.03, "n": 120},
            {"prior": "none", "kind": "bias", "cv_acc": 0.30, "cv_nll": 0.90, "cv_ece": 0.01, "n": 120}]
    assert pick(rows, "enum")["kind"] == "temperature"  # within one SE of 0.50; the 0.30 row is not a tie
    assert pick([dict(r, cv_ece=0.05) for r in rows], "enum")["kind"] == "matrix"  # equal ECE: lowest NLL
    multi = [{"prior": "neutral", "set_rule": "count", "kind": "vector", "cv_acc": 0.24, "cv_size_error": 0.9,
              "cv_ece": 0.067, "n": 120},
             {"prior": "none", "set_rule": "count", "kind": "vector", "cv_acc": 0.21, "cv_size_error": 1.0,
              "cv_ece": 0.037, "n": 120},
             {"prior": "none", "set_rule": "cardinality", "kind": "vector", "cv_acc": 0.21, "cv_size_error": 0.95,
              "cv_ece": 0.037, "n": 120}]
    assert pick(multi, "multi")["set_rule"] == "cardinality"  # tied accuracy: lowest ECE, then set-size error


def test_cv_folds_are_stratified_so_the_class_prior_scores_the_majority_share():
    """Scores without signal, gold dealt so that case-order folds hold one class each: the class-prior
    candidate must still cross-validate at the majority share (0.6), not below it."""
    import numpy as np

    from typedlm.decide.calibrate.fit import select_scalar, stratified_folds

    gold = np.array([0 if i % 5 in (0, 1) else 1 for i in range(100)])
    folds = stratified_folds(gold, 5)
    assert all(np.bincount(gold[folds == f], minlength=2).tolist() == [8, 12] for f in range(5))
    _fc, table = select_scalar(["a", "b"], "enum", np.zeros((100, 2)), gold)
    assert next(r for r in table if r["kind"] == "class_prior")["cv_acc"] == pytest.approx(0.6)
