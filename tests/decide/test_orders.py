"""Candidate-order averaging (``order="averaged"``): the same probabilities for any permutation of the
choices, each candidate's score the mean of its two views' scores, through decide, decide_many, the CLI and
the server's body (tiny random model)."""

import json

import pytest
from typer.testing import CliRunner

from typedlm.cli import app
from typedlm.decide.api import decide, decide_many, plan_for
from typedlm.decide.options import DecideOptions, OptionsError
from typedlm.decide.orders import canonical_schema
from typedlm.decide.schema import DecisionSchema

SCHEMA = {"fields": {"topic": {"type": "enum", "description": "Topic?", "choices": ["sport", "tech", "politics", "art"]},
                     "tags": {"type": "multi", "description": "Tags?", "choices": ["local", "world", "money"]},
                     "level": {"type": "enum", "description": "Level?", "choices": ["low", "mid", "high"],
                               "ordered": True},
                     "urgent": {"type": "boolean", "description": "Urgent?"}}}
PERMS = [(["politics", "art", "sport", "tech"], ["money", "local", "world"]),
         (["tech", "sport", "art", "politics"], ["world", "money", "local"])]
TEXTS = ["The match ended two all.", "A new phone chip was announced.", "Parliament passed the budget."]


def _permuted(topic, tags) -> dict:
    s = json.loads(json.dumps(SCHEMA))
    s["fields"]["topic"]["choices"], s["fields"]["tags"]["choices"] = topic, tags
    return s


def _probs(d) -> dict:
    return {n: (f.probabilities, f.count_probabilities) for n, f in d.fields.items()}


def _close(a: dict, b: dict, tol: float = 1e-6) -> None:
    for name in a:
        for x, y in zip(a[name], b[name]):
            if x is None:
                assert y is None
                continue
            assert set(x) == set(y)
            assert all(abs(x[k] - y[k]) <= tol for k in x), (name, x, y)


@pytest.mark.parametrize("prior", ["none", "neutral"])
def test_averaged_decisions_are_the_same_for_any_choice_order(tiny, prior):
    base = decide(SCHEMA, TEXTS[0], engine=tiny, prior=prior, order="averaged")
    for topic, tags in PERMS:
        d = decide(_permuted(topic, tags), TEXTS[0], engine=tiny, prior=prior, order="averaged")
        assert list(d.fields["topic"].probabilities) == topic  # the result keeps the schema's own order
        assert d.value == base.value
        _close(_probs(d), _probs(base))


def test_given_order_scores_depend_on_the_order_on_the_tiny_model(tiny):
    """The check above can fail: without averaging, a permutation moves the probabilities (by far more than
    its tolerance, though the random model's distributions are nearly flat)."""
    a = decide(SCHEMA, TEXTS[0], engine=tiny, prior="none", order="given")
    b = decide(_permuted(*PERMS[0]), TEXTS[0], engine=tiny, prior="none", order="given")
    diff = max(abs(a.fields["topic"].probabilities[k] - b.fields["topic"].probabilities[k])
               for k in a.fields["topic"].probabilities)
    assert diff > 1e-5  # 10x the invariance check's tolerance (a prefix-cache hit moves scores ~1e-8)


def test_each_candidate_scores_the_mean_of_its_two_views(tiny):
    schema = DecisionSchema.coerce(SCHEMA)
    views = [decide(canonical_schema(schema, m), TEXTS[1], engine=tiny, prior="none", order="given")
             for m in (False, True)]
    got = decide(SCHEMA, TEXTS[1], engine=tiny, prior="none", order="averaged")
    for name in ("topic", "level", "urgent"):
        mean = {k: sum(v.fields[name].log_scores[k] for v in views) / 2 for k in got.fields[name].log_scores}
        norm = __import__("math").log(sum(__import__("math").exp(x) for x in mean.values()))
        assert got.fields[name].log_scores == pytest.approx({k: x - norm for k, x in mean.items()}, abs=1e-5)
    # the ordered field keeps its order in both views; unordered fields are sorted, then reversed
    plans = [plan_for(canonical_schema(schema, m), tiny) for m in (False, True)]
    assert [p.schema["level"].values for p in plans] == [("low", "mid", "high")] * 2
    assert [p.schema["topic"].values for p in plans] == [("art", "politics", "sport", "tech"),
                                                         ("tech", "sport", "politics", "art")]
    one = decide(SCHEMA, TEXTS[1], engine=tiny, prior="none", order="given").usage["prompt_tokens"]
    assert got.usage["prompt_tokens"] > one


def test_decide_many_averaged_matches_one_at_a_time(tiny):
    many = decide_many(_permuted(*PERMS[1]), TEXTS, engine=tiny, order="averaged")
    for text, d in zip(TEXTS, many):
        _close(_probs(d), _probs(decide(SCHEMA, text, engine=tiny, order="averaged")), tol=0.02)


def test_order_option_is_checked():
    with pytest.raises(OptionsError, match="order"):
        DecideOptions.make(order="sorted")
    with pytest.raises(OptionsError, match="--order"):
        DecideOptions.from_flags(order="both")


def test_cli_decide_takes_order(tiny_dir, tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(_permuted(*PERMS[0])))
    outs = []
    for s in (schema, None):
        if s is None:
            s = tmp_path / "s2.json"
            s.write_text(json.dumps(SCHEMA))
        r = CliRunner().invoke(app, ["decide", "--model", str(tiny_dir), "--schema", str(s), "--context", TEXTS[2],
                                     "--order", "averaged", "--json"])
        assert r.exit_code == 0, r.output
        outs.append(json.loads(r.stdout))
    assert outs[0]["value"] == outs[1]["value"]
    bad = CliRunner().invoke(app, ["decide", "--model", str(tiny_dir), "--schema", str(schema), "--context", "x",
                                   "--order", "nope"])
    assert bad.exit_code != 0 and "--order" in bad.output
