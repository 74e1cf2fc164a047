"""POST /v1/decide and /v1/systemone on a real uvicorn server on loopback (tiny model; one real-model call)."""

import httpx
import pytest

from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server

SCHEMA = {"fields": {"spam": {"type": "boolean", "description": "Is it spam?"},
                     "tone": {"type": "enum", "description": "Tone?", "choices": {"calm": "", "angry": "shouting"}},
                     "tags": {"type": "multi", "description": "Tags?", "choices": ["ads", "link"]}}}
QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the user want?", "criteria": ["refund", "help", "other"]},
    "angry?": {"type": "noul", "instructions": "Is the user angry?"},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": {"low": "can wait", "medium": "soon", "high": "now"}},
}


def serve(engine):
    """The real typedlm server (create_app: batching scheduler, decisions as work of its steps)."""
    return live_server(create_app(engine, ServerConfig(warmup=False)))


@pytest.fixture(scope="module")
def base(tiny):
    with serve(tiny) as url:
        yield url


def check_systemone(out, engine_name):
    assert set(out) == {"model", "answers", "usage"} and out["model"] == engine_name
    a = out["answers"]
    assert set(a) == set(QUESTIONS)
    c = a["intent"]
    assert c["type"] == "choice" and c["choice"] in ("refund", "help", "other")
    assert abs(sum(c["probabilities"].values()) - 1) < 1e-6 and c["confidence"] == max(c["probabilities"].values())
    n = a["angry?"]
    assert n["type"] == "noul" and 0 <= n["noul"] <= 1 and n["confidence"] == max(n["noul"], 1 - n["noul"])
    s = a["urgency"]
    assert s["type"] == "score" and s["legend"] == ["low", "medium", "high"]
    assert abs(s["score"] - sum(i * p for i, p in enumerate(s["probabilities"]))) < 1e-9 and 0 <= s["score"] <= 2
    assert s["argmax_level"] == max(range(3), key=s["probabilities"].__getitem__)
    assert out["usage"]["prompt_tokens"] > 0


def test_decide_route(base):
    r = httpx.post(f"{base}/v1/decide", json={"schema": SCHEMA, "context": "BUY NOW www.x.example", "scoring": "slots"},
                   timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()
    assert set(out["value"]) == {"spam", "tone", "tags"} and out["scoring"] == "slots"
    assert set(out["fields"]["tags"]["probabilities"]) == {"ads", "link"}


def test_decide_route_takes_a_list_of_contexts(base):
    texts = ["BUY NOW www.x.example", "Thanks, all good.", "I am SO angry!!"]
    r = httpx.post(f"{base}/v1/decide", json={"schema": SCHEMA, "contexts": texts}, timeout=60)
    assert r.status_code == 200, r.text
    many = r.json()
    assert isinstance(many, list) and len(many) == 3
    for text, got in zip(texts, many):
        one = httpx.post(f"{base}/v1/decide", json={"schema": SCHEMA, "context": text}, timeout=60).json()
        assert got["value"] == one["value"]
        for name, f in one["fields"].items():
            for k, p in f["probabilities"].items():
                assert got["fields"][name]["probabilities"][k] == pytest.approx(p, abs=0.02)


@pytest.mark.parametrize("body,needle", [
    ({"schema": SCHEMA, "context": "x", "contexts": ["y"]}, "exactly one of 'context'"),
    ({"schema": SCHEMA}, "exactly one of 'context'"),
    ({"schema": SCHEMA, "contexts": []}, "contexts"),
    ({"schema": SCHEMA, "contexts": ["ok", "  "]}, "contexts[1]: context is empty"),
    ({"schema": {"fields": {"tone": {"type": "enum", "description": "d", "choices": ["a", "a"]}}}, "context": "x"},
     "field 'tone': duplicate choice 'a'"),
    ({"schema": SCHEMA, "context": ""}, "context is empty"),
    ({"schema": SCHEMA, "context": "x", "scoring": "fast"}, "scoring"),
    ({"schema": SCHEMA, "context": "x", "color": 1}, "color"),
    ({"context": "x"}, "schema"),
    ({"schema": SCHEMA, "context": "x", "abstain_below_margin": 5}, "abstain_below_margin"),
])
def test_decide_route_bad_input_is_400(base, body, needle):
    r = httpx.post(f"{base}/v1/decide", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and needle in err["message"]


def test_systemone_route(base, tiny):
    r = httpx.post(f"{base}/v1/systemone", json={"state": {"user": "I want my money back NOW"},
                                                 "questions": QUESTIONS}, timeout=60)
    assert r.status_code == 200, r.text
    check_systemone(r.json(), tiny.name)


@pytest.mark.parametrize("questions,needle", [
    ({}, "questions is empty"),
    ({"q": {"type": "choice", "instructions": "x"}}, "question 'q': a choice question needs criteria"),
    ({"q": {"type": "choice", "instructions": "x", "criteria": ["a", "a"]}}, "question 'q': duplicate choice 'a'"),
    ({"q": {"type": "noul", "instructions": "x", "criteria": ["a"]}}, "question 'q': a noul question takes no"),
    ({"q": {"type": "vibe", "instructions": "x"}}, "type"),
])
def test_systemone_bad_questions_are_400(base, questions, needle):
    r = httpx.post(f"{base}/v1/systemone", json={"state": "hello", "questions": questions}, timeout=60)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


@pytest.mark.real_model
def test_systemone_real_model(real):
    with serve(real) as url:
        r = httpx.post(f"{url}/v1/systemone", json={
            "state": "Customer: my order #1234 arrived broken and I need a replacement before Friday!!",
            "questions": QUESTIONS}, timeout=300)
    assert r.status_code == 200, r.text
    check_systemone(r.json(), real.name)


def test_decide_route_constraints_prior_calibration(base, tiny):
    from typedlm.decide.calibrate.bundle import CalibrationBundle, FieldCalibration
    from typedlm.decide.prior import fingerprint
    from typedlm.decide.prompt import PROMPT_VERSION

    schema = {**SCHEMA, "fields": {**SCHEMA["fields"], "tags": {**SCHEMA["fields"]["tags"], "exactly": 1}},
              "constraints": [{"if": {"spam": True}, "then": {"tags": "ads"}}]}
    bundle = CalibrationBundle(model="tiny", model_hash=fingerprint(tiny), prompt_version=PROMPT_VERSION,
                               scoring="labels",
                               fields={"tone": FieldCalibration(type="enum", kind="temperature", temperature=1.5)})
    body = {"schema": schema, "context": "Buy cheap watches at example.com!!!", "prior": "neutral",
            "calibration": bundle.model_dump()}
    r = httpx.post(f"{base}/v1/decide", json=body, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    f = out["fields"]
    assert len(f["tags"]["value"]) == 1 and (not f["spam"]["value"] or f["tags"]["value"] == ["ads"])
    assert (f["tone"]["calibrator"], f["tone"]["temperature"], f["tone"]["prior"]) == (bundle.id, 1.5, "neutral")
    assert isinstance(out["summary"], str) and "tone=" in out["summary"]
    r = httpx.post(f"{base}/v1/decide", json={"schema": schema, "contexts": ["Buy now!!!", "Hi, my invoice is wrong."],
                                              "prior": "batch"}, timeout=120)
    assert r.status_code == 200 and [d["fields"]["tone"]["prior"] for d in r.json()] == ["batch", "batch"], r.text
    r = httpx.post(f"{base}/v1/decide", json=dict(body, prior="none"), timeout=60)  # the bundle's field rule wins
    assert r.status_code == 200, r.text
    assert (r.json()["fields"]["tone"]["prior"], r.json()["fields"]["spam"]["prior"]) == ("neutral", "none"), r.text
    for bad, needle in ((dict(body, prior="batch"), "at least 2 contexts"),
                        (dict(body, schema={**schema, "constraints": [{"if": {"spam": True},
                                                                        "then": {"tags": "nope"}}]}), "no choice 'nope'"),
                        (dict(body, calibration={"model": "x"}), "calibration.model_hash: Field required")):
        r = httpx.post(f"{base}/v1/decide", json=bad, timeout=60)
        assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
        if needle == "at least 2 contexts":  # checked once, before queueing: the option named
            assert r.json()["error"]["param"] == "prior", r.text


def test_decide_route_dependencies_and_constrained_abstention(base, tiny):
    from typedlm.decide import decide_many

    schema = {"fields": {**SCHEMA["fields"], "tone": {**SCHEMA["fields"]["tone"], "depends_on": "spam"},
                         "tags": {**SCHEMA["fields"]["tags"], "exactly": 1}},
              "constraints": [{"if": {"spam": True}, "then": {"tags": "ads"}}]}
    ctxs = ["Buy cheap watches at example.com!!!", "Hi, my invoice is wrong."]
    r = httpx.post(f"{base}/v1/decide", json={"schema": schema, "contexts": ctxs, "prior": "none",
                                              "abstain_below_margin": 1.0}, timeout=120)
    assert r.status_code == 200, r.text
    want = decide_many(schema, ctxs, engine=tiny, prior="none", abstain_below_margin=1.0)
    for got, w in zip(r.json(), want):
        f = got["fields"]
        assert f["tone"]["score_source"] == "dependency" and f["tone"]["given"] == w.fields["tone"].given
        assert (f["tags"]["value"], f["tags"]["reason"]) == (None, "abstain")  # constrained, and it abstains
        assert f["tags"]["solver_value"] == w.fields["tags"].solver_value and len(f["tags"]["solver_value"]) == 1
        assert f["tone"]["probabilities"] == pytest.approx(w.fields["tone"].probabilities, rel=1e-4)


def test_decide_route_takes_order(base):
    """``order: "averaged"`` in the body: the same probabilities for either choice order; a bad value is a 4xx."""
    flipped = {"fields": {**SCHEMA["fields"], "tone": {**SCHEMA["fields"]["tone"],
                                                         "choices": {"angry": "shouting", "calm": ""}},
                          "tags": {**SCHEMA["fields"]["tags"], "choices": ["link", "ads"]}}}
    got = []
    for s in (SCHEMA, flipped):
        r = httpx.post(f"{base}/v1/decide", json={"schema": s, "context": "I am SO angry!!", "order": "averaged"},
                       timeout=60)
        assert r.status_code == 200, r.text
        got.append(r.json()["fields"])
    for name in ("tone", "tags"):
        a, b = got[0][name]["probabilities"], got[1][name]["probabilities"]
        assert list(b) == list(flipped["fields"][name]["choices"])  # listed in the request's order
        assert a == pytest.approx(b, abs=1e-6)
    bad = httpx.post(f"{base}/v1/decide", json={"schema": SCHEMA, "context": "x", "order": "sorted"}, timeout=60)
    assert 400 <= bad.status_code < 500 and "order" in bad.text
