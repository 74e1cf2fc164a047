"""Decision quality, round 2: the multi-label rule (count question as a set-size prior, per-context centring,
fitted threshold), DecideOptions, the fair naive track, `typedlm eval --calibration` / `--prior batch`."""

import json
import math

import jsonschema
import pytest
from typer.testing import CliRunner

from typedlm.cli import app
from typedlm.decide import prior as P
from typedlm.decide.api import decide_many, plan_for, prepare, settle
from typedlm.decide.calibrate.bundle import CalibrationBundle, FieldCalibration
from typedlm.decide.calibrate.fit import Example, fit_threshold, multi_rows
from typedlm.decide.rules import rules_for, thresholds
from typedlm.decide.options import DecideOptions, OptionsError
from typedlm.decide.prompt import PROMPT_VERSION
from typedlm.decide.result import QuestionScore
from typedlm.errors import TypedLMError
from typedlm.eval.cases import case_from_dict, write_cases
from typedlm.eval.runner import read_jsonl
from typedlm.eval.tracks import NaiveTrack, longest_answer, naive_json_schema
from typedlm.decide.schema import DecisionSchema

OPTS = ["business", "entertainment", "politics", "sport", "tech"]
MULTI = {"fields": {"topics": {"type": "multi", "description": "Which topics?", "choices": OPTS}}}


def _scores(plan, p_yes: dict, count: list[float]) -> list[QuestionScore]:
    out = []
    for q in plan.questions:
        if q.kind == "option":
            p = p_yes[q.option]
            out.append(QuestionScore((math.log(p), math.log(1 - p)), 0.0))
        else:
            out.append(QuestionScore(tuple(math.log(c) for c in count), 0.0))
    return out


def test_count_question_is_a_prior_over_set_sizes(tiny):
    """Every option at P(yes) >= 0.55 and a count question at 0.5 on "1": the old rule ("P(yes) >= 0.5", the
    count overriding only at >= 0.6 confidence) selected all five; the joint rule picks the one best option."""
    plan = plan_for(MULTI, tiny)
    p_yes = {"business": 0.55, "entertainment": 0.55, "politics": 0.6, "sport": 0.55, "tech": 0.55}
    count = [0.1, 0.5, 0.1, 0.1, 0.1, 0.1]
    _, fields = settle(plan, _scores(plan, p_yes, count), DecideOptions(set_rule="count"))
    assert fields["topics"].value == ["politics"]
    # a confident per-option signal still beats a weak count prior: log-odds 2.2 each vs log(0.5 / 0.1)
    p_yes = {"business": 0.9, "entertainment": 0.1, "politics": 0.9, "sport": 0.1, "tech": 0.1}
    _, fields = settle(plan, _scores(plan, p_yes, count), DecideOptions(set_rule="count"))
    assert fields["topics"].value == ["business", "politics"]


def test_bundle_threshold_and_schema_bounds_enter_the_same_rule(tiny):
    plan = plan_for(MULTI, tiny)
    p_yes = {"business": 0.9, "entertainment": 0.1, "politics": 0.8, "sport": 0.1, "tech": 0.1}
    flat = [1 / 6] * 6
    sc = _scores(plan, p_yes, flat)
    assert settle(plan, sc, DecideOptions())[1]["topics"].value == ["business", "politics"]
    bundle = CalibrationBundle(model="m", model_hash="h", prompt_version=PROMPT_VERSION, scoring="labels",
                               fields={"topics": FieldCalibration(
                                   type="multi", kind="logistic", a=1.0, b=0.0, threshold=1.5, set_rule="count")})
    assert thresholds(rules_for(plan, DecideOptions(calibration=bundle))) == {"topics": 1.5}
    # t = 1.5 nats: politics (log-odds 1.39) drops out, business (2.20) stays
    assert settle(plan, sc, DecideOptions(calibration=bundle))[1]["topics"].value == ["business"]
    bounded = plan_for({"fields": {"topics": {**MULTI["fields"]["topics"], "max_selected": 1}}}, tiny)
    assert settle(bounded, sc, DecideOptions())[1]["topics"].value == ["business"]
    at_least = plan_for({"fields": {"topics": {**MULTI["fields"]["topics"], "min_selected": 3}}}, tiny)
    got = settle(at_least, sc, DecideOptions())[1]["topics"]
    assert len(got.value) == 3 and {"business", "politics"} <= set(got.value) and got.constraint_changed


def test_prior_step_centres_multi_options_per_context(tiny):
    """A shift shared by every option (what real text does to the yes rows, bench/results/multi-rule-cpu.md)
    is removed; the ranking stays; content-free-like inputs (equal log-odds) land at P(yes) = 0.5."""
    plan = plan_for(MULTI, tiny)
    base = {"business": 0.55, "entertainment": 0.5, "politics": 0.45, "sport": 0.4, "tech": 0.35}
    shifted = {k: 1 / (1 + math.exp(-(math.log(p / (1 - p)) + 1.3))) for k, p in base.items()}
    flat = [1 / 6] * 6
    none_logs = [tuple([0.0, 0.0]) if q.kind == "option" else tuple([0.0] * 6) for q in plan.questions]
    a = P.adjust(plan, _scores(plan, base, flat), "neutral", none_logs)
    b = P.adjust(plan, _scores(plan, shifted, flat), "neutral", none_logs)
    for x, y in zip(a, b):
        assert x.log_scores == pytest.approx(y.log_scores, abs=1e-9)
    yes = [math.exp(s.log_scores[0]) for q, s in zip(plan.questions, a) if q.kind == "option"]
    assert yes == sorted(yes, reverse=True) and sum(math.log(p / (1 - p)) for p in yes) == pytest.approx(0, abs=1e-9)
    even = P.adjust(plan, _scores(plan, {k: 0.8 for k in OPTS}, flat), "neutral", none_logs)
    assert all(math.exp(s.log_scores[0]) == pytest.approx(0.5) for q, s in zip(plan.questions, even)
               if q.kind == "option")
    assert P.adjust(plan, _scores(plan, base, flat), "none", None)[0].log_scores == \
        pytest.approx((math.log(0.55), math.log(0.45)))  # prior "none": raw


def test_fit_threshold_recovers_the_set_sizes():
    """Cases whose gold is the single best option, every option scored yes-biased: t = 0 selects too many,
    the fitted threshold gets the exact sets back."""
    exs = []
    for i in range(20):
        top = OPTS[i % 5]
        ly = {o: math.log(0.9 if o == top else 0.7) for o in OPTS}
        exs.append(Example(scores={"topics": ly}, gold={"topics": [top]}, counts={"topics": [math.log(1 / 6)] * 6}))
    t = fit_threshold(multi_rows(exs, "topics", None), lambda count: count)
    assert 0.85 <= t < 2.2  # between the runner-up's log-odds (0.85) and the top option's (2.2)


def test_decide_options_are_one_validated_object(tiny, no_prefix_cache):
    # cache off: a second call on a cached prompt is scored fused off CUDA (equal within CACHED_PROB_TOL, not bit for bit)
    opts = DecideOptions(prior="none", abstain_below_margin=0.2)
    with pytest.raises(Exception):
        opts.prior = "batch"  # frozen
    with pytest.raises(OptionsError, match="abstain_below_margin"):
        DecideOptions.make(abstain_below_margin=3)
    with pytest.raises(OptionsError, match="packing"):
        DecideOptions.make(opts, packing="sideways")
    assert DecideOptions.make(opts, scoring="slots").prior == "none"  # overrides keep the rest
    spec = {"fields": {"tone": {"type": "enum", "description": "Tone?", "choices": ["calm", "angry"]}}}
    # the options object and keyword overrides are the same thing
    a = decide_many(spec, ["Hello there.", "Go away!"], opts, engine=tiny)
    b = decide_many(spec, ["Hello there.", "Go away!"], engine=tiny, prior="none", abstain_below_margin=0.2)
    assert [d.fields["tone"].probabilities for d in a] == [d.fields["tone"].probabilities for d in b]
    with pytest.raises(TypedLMError, match=r"contexts\[1\]: context is empty"):
        prepare(spec, ["ok", " "], engine=tiny)  # checked before any model work, naming the context


def test_fair_naive_schema_is_bounded_and_compiles(tiny):
    schema = DecisionSchema.from_dict(MULTI)
    js = naive_json_schema(schema)
    arr = js["properties"]["topics"]
    assert arr["uniqueItems"] is True and arr["maxItems"] == 5
    v = jsonschema.Draft202012Validator(js)
    assert v.is_valid({"topics": ["sport", "tech"]}) and not v.is_valid({"topics": ["sport", "sport"]})
    track = NaiveTrack(tiny)
    # 5 options (326 distinct arrays) and 4: uniqueItems kept (the decode-time guard enforces it)
    assert track.json_schema(schema)["properties"]["topics"]["uniqueItems"] is True
    four = DecisionSchema.from_dict({"fields": {"t": {**MULTI["fields"]["topics"], "choices": OPTS[:4]}}})
    assert track.json_schema(four)["properties"]["t"] == {**naive_json_schema(four)["properties"]["t"],
                                                          "uniqueItems": True}
    # every valid answer fits: the longest has all five options
    assert track.max_tokens(schema) >= len(tiny.tokenizer.encode(longest_answer(schema), add_special_tokens=False))
    answers = track.answer(MULTI, "Shares rose as the minister spoke about the football league.")
    a = answers[0]
    assert not a.truncated and a.error is None, a.error  # the random model cannot run on: the grammar ends it
    assert len(set(a.pred)) == len(a.pred) <= 5


def test_naive_truncation_is_recorded(tiny, monkeypatch):
    from typedlm.eval import tracks

    monkeypatch.setattr(tracks, "NAIVE_SLACK_TOKENS", -12)  # a budget below the answer: it must be cut
    answers = NaiveTrack(tiny).answer(MULTI, "Shares rose as the minister spoke.")
    assert answers[0].truncated and not answers[0].violation and "truncated at max_tokens" in answers[0].error


CASE_SCHEMA = {"fields": {"tone": {"type": "enum", "description": "Tone?", "choices": ["calm", "angry"]},
                          "tags": {"type": "multi", "description": "Which apply?", "choices": ["refund", "bug"]}}}


def _cases(n):
    texts = ["Please refund me.", "The app crashes!", "Thanks, all good.", "Refund now, it is broken!!"]
    return [case_from_dict({"id": f"c{i}", "schema": CASE_SCHEMA, "context": texts[i % 4] + f" #{i}",
                            "labels": {"tone": ["calm", "angry"][i % 2], "tags": [["refund"], ["bug"], [],
                                                                                  ["refund", "bug"]][i % 4]},
                            "split": "test"}) for i in range(n)]


def _eval(args, tmp_path, tiny_dir, name):
    out = tmp_path / name
    r = CliRunner().invoke(app, ["eval", "--data", str(tmp_path / "cases.jsonl"), "--track", "parallel",
                                 "--modes", "labels", "--model", str(tiny_dir), "--out", str(out), "--quiet",
                                 "--no-flip", *args])
    return r, out


def test_eval_calibration_and_batch_prior_on_the_tiny_model(tiny, tiny_dir, tmp_path):
    from typedlm.decide.prior import fingerprint
    from typedlm.engine import load_engine

    cases = _cases(6)
    write_cases(tmp_path / "cases.jsonl", cases)
    fp = fingerprint(load_engine(str(tiny_dir), progress=False))
    bundle = CalibrationBundle(model="tiny", model_hash=fp, prompt_version=PROMPT_VERSION, scoring="labels",
                               fields={
                                   "tone": FieldCalibration(type="enum", kind="temperature", temperature=2.0),
                                   "tags": FieldCalibration(type="multi", kind="logistic", a=2.0, b=-0.5,
                                                            threshold=0.25, set_rule="count")})
    (tmp_path / "b.json").write_text(bundle.model_dump_json())
    r, out = _eval(["--calibration", str(tmp_path / "b.json"), "--chunk", "4"], tmp_path, tiny_dir, "cal")
    assert r.exit_code == 0, r.output
    rows = read_jsonl(out / "predictions.jsonl")
    assert len(rows) == 12 and all(row["record"]["calibrator"] == bundle.id for row in rows)
    # the run's numbers are decide's: the same cases through decide_many with the bundle
    eng = load_engine(str(tiny_dir), progress=False)
    want = decide_many(CASE_SCHEMA, [c.context for c in cases], engine=eng, calibration=bundle)
    got = {(row["case_id"], row["field"]): row for row in rows}
    for c, d in zip(cases, want):
        assert got[(c.id, "tone")]["probabilities"] == pytest.approx(d.fields["tone"].probabilities, abs=1e-4)
        assert got[(c.id, "tags")]["pred"] == d.fields["tags"].value
    # the bundle's fields keep their own prior mode whatever --prior says (it applies to the other fields)
    r, out = _eval(["--calibration", str(tmp_path / "b.json"), "--prior", "none", "--limit", "2"], tmp_path, tiny_dir,
                   "other-prior")
    assert r.exit_code == 0, r.output
    assert {row["record"]["prior"] for row in read_jsonl(out / "predictions.jsonl")} == {"neutral"}
    # --prior batch: each chunk is one decide_many call with its own prior
    r, out = _eval(["--prior", "batch", "--chunk", "3", "--limit", "6"], tmp_path, tiny_dir, "batch")
    assert r.exit_code == 0, r.output
    rows = read_jsonl(out / "predictions.jsonl")
    assert {row["record"]["prior"] for row in rows} == {"batch"}
    order = list(dict.fromkeys(row["case_id"] for row in rows))  # the run's (seeded) case order
    first = [next(c for c in cases if c.id == cid) for cid in order[:3]]
    want = decide_many(CASE_SCHEMA, [c.context for c in first], engine=eng, prior="batch")
    for c, d in zip(first, want):
        row = next(x for x in rows if x["case_id"] == c.id and x["field"] == "tone")
        assert row["probabilities"] == pytest.approx(d.fields["tone"].probabilities, abs=1e-4)
    report = json.loads((out / "run.json").read_text())
    assert report["chunk"] == 3 and report["tracks"][0]["prior"] == "batch"


EXAMPLES = [{"context": "Markets fell after the budget speech.", "labels": {"topics": ["business", "politics"]}},
            {"context": "The striker scored twice.", "labels": {"topics": ["sport"]}}]


def test_examples_are_in_the_shared_prefix_and_the_prompt_hash(tiny):
    from typedlm.decide.prompt import prompt_hash, prompt_ids, render_user
    from typedlm.errors import SchemaError

    with_ex = plan_for({**MULTI, "examples": EXAMPLES}, tiny)
    plain = plan_for(MULTI, tiny)
    text = render_user(with_ex, "New phones were shown.")
    assert text.index("Markets fell") < text.index("The striker") < text.index("New phones")
    assert '"topics":{"business":true,"entertainment":false,"politics":true,"sport":false,"tech":false}' in text
    assert "Example" not in render_user(plain, "x")
    assert prompt_hash(with_ex) != prompt_hash(plain)
    # the examples sit in the prefix every context shares: decide_many prefills them once
    ctxs = ["New phones were shown.", "The minister resigned."]
    a, b = (prompt_ids(tiny, with_ex, c) for c in ctxs)
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    fence = text.rindex("<text-", 0, text.index("New phones"))  # the context's opening fence
    ex_end = len(tiny.tokenizer.encode(text[:fence], add_special_tokens=False))
    assert common >= ex_end - 2  # the whole examples block is in the common prefix (template tokens aside)
    ds = decide_many({**MULTI, "examples": EXAMPLES}, ctxs, engine=tiny, prior="none")
    assert ds[0].usage["shared_prefix_tokens"] >= ex_end - 2
    one = decide_many({**MULTI, "examples": EXAMPLES}, ctxs[1:], engine=tiny, prior="none")[0]
    assert one.fields["topics"].probabilities == pytest.approx(ds[1].fields["topics"].probabilities, abs=1e-4)
    rec = ds[0].to_dict()["prompt"]
    assert rec["version"] == PROMPT_VERSION and rec["examples"] == 2 and rec["examples_hash"]
    assert rec["hash"] == prompt_hash(with_ex)
    assert decide_many(MULTI, ctxs[:1], engine=tiny, prior="none")[0].prompt["examples"] == 0
    with pytest.raises(SchemaError, match=r"examples\[0\]: label \['weather'\] is not a value of field 'topics'"):
        plan_for({**MULTI, "examples": [{"context": "x", "labels": {"topics": ["weather"]}}]}, tiny)


def test_examples_from_a_pydantic_model(tiny):
    from typing import Literal

    from pydantic import BaseModel, ConfigDict

    class Topics(BaseModel):
        model_config = ConfigDict(json_schema_extra={"examples": [
            {"context": "The striker scored twice.", "labels": {"topic": "sport"}}]})
        topic: Literal["business", "sport"]

    plan = plan_for(Topics, tiny)
    assert plan.schema.examples == (("The striker scored twice.", (("topic", "sport"),)),)
