"""Evaluation data: the offline datasets, the case format, the lock, splits and bad cases."""

import collections
import json

import pytest

from typedlm.errors import TypedLMError
from typedlm.eval import datasets
from typedlm.eval.cases import BadCase, Case, case_from_dict, check_case, data_sha256, read_cases, select, split_of, \
    write_cases


@pytest.fixture(scope="module")
def loaded():
    return {n: datasets.load(n) for n in datasets.DATASETS}


def test_datasets_sizes_labels_and_splits(loaded):
    bbc, tweets, multi = loaded["bbc"], loaded["tweets"], loaded["bbc-multi"]
    assert len(bbc) == 2225
    assert collections.Counter(c.labels["topic"] for c in bbc) == {"business": 510, "entertainment": 386,
                                                                   "politics": 417, "sport": 511, "tech": 401}
    assert set(c.labels["sentiment"] for c in tweets) == set(datasets.SENTIMENTS)
    assert len({c.context for c in tweets}) == len(tweets)  # duplicates kept once
    for cs in loaded.values():
        assert len(select(cs, "test", None)) >= 200
        assert {c.split for c in cs} == {"train", "calibration", "test"}
        assert len({c.id for c in cs}) == len(cs)
        for c in cs[:50]:
            check_case(c)  # every built case is a valid case


def test_bbc_contexts_are_truncated_deterministically(loaded):
    assert max(len(c.context) for c in loaded["bbc"]) <= datasets.ARTICLE_CHARS
    assert datasets.truncate("aaa bbb ccc", 9) == "aaa bbb"
    assert datasets.truncate("short", 100) == "short"
    assert data_sha256(datasets.bbc()[:20]) == data_sha256(loaded["bbc"][:20])


def test_multi_gold_is_the_topics_of_its_articles(loaded):
    sizes = collections.Counter()
    for c in loaded["bbc-multi"]:
        ids = c.id.removeprefix("multi-").split("+")
        topics = sorted(i.split("-")[1] for i in ids)
        assert c.labels["topics"] == topics and len(set(topics)) == len(topics)
        assert all(split_of(i) == c.split for i in ids)  # no article crosses splits
        assert c.context.count("\n\n---\n\n") == len(ids) - 1
        sizes[len(ids)] += 1
    assert set(sizes) == {1, 2, 3}


def test_split_and_order_are_seeded_hashes():
    assert split_of("bbc-tech-054") == split_of("bbc-tech-054")
    counts = collections.Counter(split_of(f"x{i}") for i in range(5000))
    assert 0.55 < counts["train"] / 5000 < 0.65 and 0.15 < counts["test"] / 5000 < 0.25
    cs = [Case(f"c{i}", f"c{i}", "t", {}, "x", {}, "test") for i in range(30)]
    assert [c.id for c in select(cs, "test", 5)] == [c.id for c in select(list(reversed(cs)), "test", 5)]
    with pytest.raises(TypedLMError, match="split must be"):
        select(cs, "dev", None)


SCHEMA = {"fields": {"topic": {"type": "enum", "description": "Topic?", "choices": ["a", "b"]},
                     "tags": {"type": "multi", "description": "Tags?", "choices": ["x", "y", "z"]},
                     "urgent": {"type": "boolean", "description": "Urgent?"}}}


def test_cases_file_roundtrip_and_lock(tmp_path):
    cases = [case_from_dict({"id": i, "schema": SCHEMA, "context": f"text {i}",
                             "labels": {"topic": "a", "tags": ["z", "x"], "urgent": True}}) for i in range(4)]
    path = tmp_path / "cases.jsonl"
    lock = write_cases(path, cases)
    assert lock["cases"] == 4 and read_cases(path) == cases
    _, gold = check_case(cases[0])
    assert gold == {"topic": "a", "tags": ["x", "z"], "urgent": "true"}  # schema order, boolean as a key
    text = path.read_text().replace("text 1", "text one")
    path.write_text(text)
    with pytest.raises(TypedLMError, match="does not match its lock"):
        read_cases(path)


@pytest.mark.parametrize("change, match", [
    ({"context": "   "}, "context is empty"),
    ({"labels": {"topic": "c", "tags": [], "urgent": False}}, "not one of its choices"),
    ({"labels": {"topic": "a", "tags": ["w"], "urgent": False}}, "must be a list of its choices"),
    ({"labels": {"topic": "a", "tags": [], "urgent": "yes"}}, "must be true or false"),
    ({"labels": {"topic": "a"}}, "missing"),
    ({"schema": {"fields": {"topic": {"type": "enum", "description": "x", "choices": ["a"]}}}}, "at least 2"),
])
def test_bad_cases_name_the_problem(change, match):
    base = {"id": "k", "schema": SCHEMA, "context": "t", "labels": {"topic": "a", "tags": [], "urgent": False}}
    with pytest.raises(BadCase, match=match):
        check_case(case_from_dict({**base, **change}))


def test_malformed_cases_file_is_an_error(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"id": 1, "schema": SCHEMA, "context": "x"}) + "\n")
    with pytest.raises(TypedLMError, match="missing key"):
        read_cases(p)
    p.write_text("{not json\n")
    with pytest.raises(TypedLMError, match="not valid JSON"):
        read_cases(p)
