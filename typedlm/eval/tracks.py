"""Tracks: one way each of answering every field of a case, on the same cases and the same model.

``parallel``     ``decide_many`` (one prefill, every candidate scored), modes ``labels`` and ``slots``.
``naive_local``  grammar-constrained JSON generation through ``typedlm.generate`` with a prompt a user would
                 write (greedy; the JSON Schema a user would write: an enum per field, a list of enums for
                 multi fields). It gives no probabilities: the answer gets 1.0.
``openai``       any OpenAI-compatible server (``typedlm serve`` included): one chat request per scalar field
                 (per option for multi fields: yes / no), ``max_tokens=1``, ``logprobs`` + ``top_logprobs``.
                 A top token counts for every choice it is a prefix of (or that is a prefix of it), its
                 probability split evenly among them; a choice no top token reaches gets a floor (the
                 smallest top-k probability, an upper bound of any token outside the top k) and the field
                 is marked ``truncated``.

Each track returns one :class:`FieldAnswer` per field. ``scores`` (what a calibrator refits) are the log-scores
the probabilities were made from: scalar fields ``{choice: log-score}`` (probabilities = softmax of them);
multi fields ``{option: [log-score yes, log-score no]}`` (P(yes) = softmax of the pair). For ``parallel``
they are decide's constrained log-probabilities (``FieldResult.log_scores``), for ``openai`` the log of the
matched top-k mass (floored). ``naive_local`` has none (null).
"""

from __future__ import annotations

from dataclasses import dataclass
import json
import math
import random
import time
from typing import Any

from ..decide.api import decide_many
from ..decide.result import RECORD_KEYS
from ..decide.schema import DecisionSchema
from ..errors import GrammarCompileError, TypedLMError
from ..generate.api import generate
from ..grammar.spec import make_constraint

TRACKS = ("parallel", "naive_local", "openai")
NAIVE_PROMPT_VERSION = "naive-v2"  # v2: bounded arrays, compact JSON, max_tokens from the longest answer
OPENAI_PROMPT_VERSION = "openai-v1"
TOP_LOGPROBS = 20


class InfraError(TypedLMError):
    """The infrastructure failed (server down, connection refused, 5xx): counts toward the circuit breaker."""


@dataclass
class FieldAnswer:
    field: str
    field_type: str
    choices: list
    pred: Any  # scalar: a choice key ("true"/"false" for booleans) or None; multi: list of options or None
    probabilities: dict | None
    scores: dict | None
    legal_mass: float | None = None
    latency_s: float = 0.0  # wall time of the call that answered this field
    truncated: bool = False
    violation: bool = False  # the model's own answer was not a legal value (invalid JSON, off-list token)
    error: str | None = None
    record: dict | None = None  # parallel: how decide made the number (score_source, temperature, calibrator, ...)


def choice_keys(f) -> list[str]:
    return ["true", "false"] if f.type == "boolean" else list(f.values)


def permuted_schema(schema: dict, case_id: str) -> tuple[dict, dict]:
    """The schema with every field's choices in a seeded non-identity order; (schema, field -> shown order)."""
    out = json.loads(json.dumps(schema))
    order: dict = {}
    for name, fs in out["fields"].items():
        ch = fs.get("choices")
        if not ch or len(ch) < 2:
            continue
        items = list(ch.items()) if isinstance(ch, dict) else [(c, None) for c in ch]
        rng = random.Random(f"perm:{case_id}:{name}")
        idx = list(range(len(items)))
        rng.shuffle(idx)
        if idx == sorted(idx):
            idx = idx[1:] + idx[:1]
        items = [items[i] for i in idx]
        fs["choices"] = dict(items) if isinstance(ch, dict) else [c for c, _ in items]
        order[name] = [c for c, _ in items]
    return out, order


class ParallelTrack:
    """``decide_many`` with one :class:`DecideOptions` (its ``scoring`` is the mode). The runner gives it the
    cases of a chunk at once (:meth:`answer_many`): one ``decide_many`` call, so ``prior="batch"`` takes each
    chunk's own prior."""
    name = "parallel"

    def __init__(self, engine, options):
        self.engine, self.options = engine, options
        self.mode = options.scoring

    def config(self) -> dict:  # prior and bundle are settings: a resumed run with others is refused
        cal = self.options.calibration
        return {"track": self.name, "mode": self.mode, "prior": self.options.prior, "order": self.options.order,
                "calibration": cal.id if cal is not None else None}

    def answer(self, schema_dict: dict, context: str) -> list[FieldAnswer]:
        return self.answer_many(schema_dict, [context])[0]

    def answer_many(self, schema_dict: dict, contexts: list[str]) -> list[list[FieldAnswer]]:
        schema = DecisionSchema.from_dict(schema_dict)
        t0 = time.perf_counter()
        ds = decide_many(schema, contexts, self.options, engine=self.engine)
        dt = (time.perf_counter() - t0) / len(contexts)
        return [decision_answers(schema, d, dt) for d in ds]


def decision_answers(schema: DecisionSchema, d, latency_s: float) -> list[FieldAnswer]:
    """A Decision's fields as FieldAnswers (also used by ``typedlm bench trust`` for its variants)."""
    out = []
    for f in schema.fields:
        r = d.fields[f.name]
        if f.type == "multi":
            scores = {o: [ly, math.log1p(-math.exp(ly)) if ly < 0 else -math.inf] for o, ly in r.log_scores.items()}
            pred = list(r.value) if r.value is not None else None
        else:
            scores = dict(r.log_scores)
            pred = (("true" if r.value else "false") if f.type == "boolean" else r.value) if r.value is not None \
                else None
        rec = {k: v for k, v in r.to_dict().items() if k in RECORD_KEYS}
        out.append(FieldAnswer(f.name, f.type, choice_keys(f), pred, dict(r.probabilities), scores,
                               r.legal_mass, latency_s, record=rec))
    return out


def naive_json_schema(schema: DecisionSchema, unique: bool = True) -> dict:
    """The JSON Schema a careful user would write for the answer: an enum per field, and a multi field as a
    *bounded* list of its options (``maxItems`` = the number of options, ``uniqueItems`` when ``unique``),
    so a small model cannot repeat items until ``max_tokens``."""
    props: dict = {}
    for f in schema.fields:
        if f.type == "boolean":
            props[f.name] = {"type": "boolean"}
        elif f.type == "enum":
            props[f.name] = {"type": "string", "enum": list(f.values)}
        else:
            props[f.name] = {"type": "array", "items": {"type": "string", "enum": list(f.values)},
                             "maxItems": len(f.values), **({"uniqueItems": True} if unique else {})}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def longest_answer(schema: DecisionSchema) -> str:
    """The longest valid answer in compact JSON (every multi option selected, the longest enum value)."""
    value: dict = {}
    for f in schema.fields:
        if f.type == "boolean":
            value[f.name] = False
        elif f.type == "enum":
            value[f.name] = max(f.values, key=lambda v: len(json.dumps(v)))
        else:
            value[f.name] = list(f.values)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


NAIVE_SLACK_TOKENS = 8  # over the longest valid answer's tokens (tokenization of a value differs in context)


def naive_prompt(schema: DecisionSchema, context: str) -> str:
    lines = [schema.description or "Read the text and answer the questions.", "", context, "",
             "Answer in JSON with these keys:"]
    for f in schema.fields:
        opts = ", ".join(f'"{v}"' for v in f.values)
        kind = {"boolean": "true or false", "enum": f"one of {opts}", "multi": f"a list of any of {opts}"}[f.type]
        lines.append(f'- "{f.name}": {f.description} ({kind})')
    return "\n".join(lines)


class NaiveTrack:
    name = "naive_local"
    mode = "json"

    def __init__(self, engine):
        self.engine = engine

    def config(self) -> dict:
        return {"track": self.name, "mode": self.mode, "prompt_version": NAIVE_PROMPT_VERSION}

    def json_schema(self, schema: DecisionSchema) -> dict:
        """:func:`naive_json_schema` with ``uniqueItems`` where the grammar enforces it exactly (typedlm
        enumerates distinct arrays up to ``MAX_ENUM`` = 256: 4 options give 65, 5 give 326), else without it
        (``maxItems`` still bounds the list; a repeated option counts once)."""
        js = naive_json_schema(schema)
        try:
            self.engine.grammars.compile(make_constraint(json_schema=js, any_whitespace=False))
        except GrammarCompileError:
            js = naive_json_schema(schema, unique=False)
        return js

    def max_tokens(self, schema: DecisionSchema) -> int:
        """The longest valid answer's tokens plus NAIVE_SLACK_TOKENS: every valid answer fits."""
        return len(self.engine.tokenizer.encode(longest_answer(schema), add_special_tokens=False)) + NAIVE_SLACK_TOKENS

    def answer(self, schema_dict: dict, context: str) -> list[FieldAnswer]:
        schema = DecisionSchema.from_dict(schema_dict)
        t0 = time.perf_counter()
        r = generate(messages=[{"role": "user", "content": naive_prompt(schema, context)}], engine=self.engine,
                     json_schema=self.json_schema(schema), temperature=0.0, any_whitespace=False,
                     max_tokens=self.max_tokens(schema))
        dt = time.perf_counter() - t0
        value, err = None, None
        truncated = r.finish_reason == "length"
        if truncated:
            err = f"truncated at max_tokens={self.max_tokens(schema)}: {r.text[:80]!r}"
        elif r.finish_reason == "error":
            err = r.error or "generation failed"
        elif not r.schema_valid:
            err = f"not valid JSON for the schema (finish_reason {r.finish_reason}): {r.text[:80]!r}"
        else:
            value = json.loads(r.text)
        out = []
        for f in schema.fields:
            keys = choice_keys(f)
            if value is None:
                out.append(FieldAnswer(f.name, f.type, keys, None, None, None, None, dt, truncated=truncated,
                                       violation=not truncated, error=err))
                continue
            v = value[f.name]
            if f.type == "multi":
                pred = [o for o in keys if o in v]
                probs = {o: float(o in pred) for o in keys}
            else:
                pred = ("true" if v else "false") if f.type == "boolean" else v
                probs = {k: float(k == pred) for k in keys}
            out.append(FieldAnswer(f.name, f.type, keys, pred, probs, None, None, dt))
        return out


def _match(token: str, keys: list[str]) -> list[str]:
    t = token.strip().strip("\"'`").lower()
    if not t:
        return []
    return [k for k in keys if k.lower().startswith(t) or t.startswith(k.lower())]


def top_logprob_scores(top: list[tuple[str, float]], keys: list[str]) -> tuple[dict, float, bool, bool]:
    """(log-score per key, legal mass, truncated, violation) from one position's top logprobs."""
    mass = {k: 0.0 for k in keys}
    for tok, lp in top:
        m = _match(tok, keys)
        for k in m:
            mass[k] += math.exp(lp) / len(m)
    legal = sum(mass.values())
    floor = math.exp(min(lp for _, lp in top)) if top else 1e-12
    truncated = any(v == 0.0 for v in mass.values())
    scores = {k: math.log(v if v > 0 else floor) for k, v in mass.items()}
    violation = not top or not _match(max(top, key=lambda t: t[1])[0], keys)
    return scores, legal, truncated, violation


def _softmax(scores: dict) -> dict:
    m = max(scores.values())
    ex = {k: math.exp(v - m) for k, v in scores.items()}
    s = sum(ex.values())
    return {k: v / s for k, v in ex.items()}


class OpenAITrack:
    name = "openai"
    mode = "logprobs"

    def __init__(self, base_url: str, *, model: str | None = None, api_key: str | None = None, timeout: float = 120.0):
        import openai  # optional extra: openai

        self.base_url = base_url
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused", max_retries=0, timeout=timeout)
        self._model = model

    def config(self) -> dict:
        return {"track": self.name, "mode": self.mode, "base_url": self.base_url, "model": self._model,
                "prompt_version": OPENAI_PROMPT_VERSION, "top_logprobs": TOP_LOGPROBS}

    def model(self) -> str:
        if self._model is None:
            self._model = self._call(lambda: self.client.models.list().data[0].id)
        return self._model

    def _call(self, fn):
        import openai  # optional extra: openai

        try:
            return fn()
        except (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError,
                openai.RateLimitError) as e:
            raise InfraError(f"{type(e).__name__}: {e}") from e
        except openai.APIStatusError as e:  # 4xx: this request is bad (e.g. too long), not the server
            raise TypedLMError(f"server refused the request ({e.status_code}): {e.message}") from e

    def _ask(self, question: str, keys: list[str]) -> tuple[dict, float, bool, bool, float]:
        model = self.model()
        t0 = time.perf_counter()
        r = self._call(lambda: self.client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": question}], max_tokens=1, temperature=0,
            logprobs=True, top_logprobs=TOP_LOGPROBS))
        dt = time.perf_counter() - t0
        content = (r.choices[0].logprobs.content or []) if r.choices[0].logprobs else []
        top = [(t.token, t.logprob) for t in content[0].top_logprobs] if content else []
        return (*top_logprob_scores(top, keys), dt)

    def answer(self, schema_dict: dict, context: str) -> list[FieldAnswer]:
        schema = DecisionSchema.from_dict(schema_dict)
        out = []
        for f in schema.fields:
            keys = choice_keys(f)
            if f.type != "multi":
                opts = ", ".join(keys)
                scores, legal, trunc, viol, dt = self._ask(f"{context}\n\n{f.description} Answer with one word, "
                                                           f"one of: {opts}.", keys)
                probs = _softmax(scores)
                out.append(FieldAnswer(f.name, f.type, keys, max(probs, key=probs.get), probs, scores, legal, dt,
                                       trunc, viol))
                continue
            scores, probs, legal, trunc, viol, total = {}, {}, 1.0, False, False, 0.0
            for o in keys:
                s, lm, t, v, dt = self._ask(f"{context}\n\n{f.description} Does \"{o}\" apply? Answer yes or no.",
                                            ["yes", "no"])
                scores[o] = [s["yes"], s["no"]]
                probs[o] = _softmax(s)["yes"]
                legal, trunc, viol, total = legal * lm, trunc or t, viol or v, total + dt
            out.append(FieldAnswer(f.name, f.type, keys, [o for o in keys if probs[o] >= 0.5], probs, scores, legal,
                                   total, trunc, viol))
        return out
