"""Evaluation cases: the ``cases.jsonl`` format, validation, seeded splits and the data lock.

One case per line: ``{"id", "group_id", "source", "schema", "context", "labels", "split"}``.
``schema`` is a decision schema dict (:mod:`typedlm.decide.schema`), ``labels`` maps every field to its
gold value (enum: a choice; boolean: true/false; multi: a list of choices). ``split`` is one of
``train`` / ``calibration`` / ``test``, assigned by :func:`split_of` (a seeded hash of the id: 60/20/20).

The lock is the sha256 of the cases' canonical JSON lines (:func:`data_sha256`); ``write_cases`` writes it
beside the file as ``<file>.lock`` and ``read_cases`` refuses a file whose lock does not match.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
import hashlib
import json
from pathlib import Path
from typing import Any

from ..decide.schema import DecisionSchema
from ..errors import TypedLMError
from ..grammar.spec import canonical_json

SPLITS = ("train", "calibration", "test")
SPLIT_SEED = "typedlm-eval-v1"
SPLIT_BOUNDS = (0.6, 0.8)  # hash < 0.6 train, < 0.8 calibration, else test
CASE_KEYS = ("id", "group_id", "source", "schema", "context", "labels", "split")


class BadCase(TypedLMError):
    """A case that cannot be evaluated (empty context, labels outside the schema, ...): reported and skipped."""


@dataclass(frozen=True)
class Case:
    id: str
    group_id: str
    source: str
    schema: dict
    context: str
    labels: dict
    split: str

    def to_dict(self) -> dict:
        return asdict(self)


def hash_unit(key: str, seed: str = SPLIT_SEED) -> float:
    """A number in [0, 1) from a seeded sha256 of ``key`` (splits, case order)."""
    return int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()[:15], 16) / 16 ** 15


def split_of(case_id: str, seed: str = SPLIT_SEED) -> str:
    u = hash_unit(case_id, seed)
    return SPLITS[0] if u < SPLIT_BOUNDS[0] else SPLITS[1] if u < SPLIT_BOUNDS[1] else SPLITS[2]


def case_from_dict(d: Any, where: str = "case") -> Case:
    if not isinstance(d, dict):
        raise TypedLMError(f"{where}: a case must be a JSON object")
    missing = [k for k in CASE_KEYS if k not in d and k not in ("group_id", "source", "split")]
    if missing:
        raise TypedLMError(f"{where}: missing key(s) {', '.join(missing)} (a case has {', '.join(CASE_KEYS)})")
    extra = sorted(set(d) - set(CASE_KEYS))
    if extra:
        raise TypedLMError(f"{where}: unknown key(s) {', '.join(extra)}")
    cid = str(d["id"])
    split = d.get("split") or split_of(cid)
    if split not in SPLITS:
        raise TypedLMError(f"{where}: split must be one of {', '.join(SPLITS)}, got {split!r}")
    if not isinstance(d["schema"], dict) or not isinstance(d["labels"], dict):
        raise TypedLMError(f"{where}: 'schema' and 'labels' must be JSON objects")
    return Case(cid, str(d.get("group_id") or cid), str(d.get("source") or "file"), d["schema"],
                d["context"] if isinstance(d["context"], str) else "", d["labels"], split)


def gold_key(field, value: Any) -> Any:
    """A label in the form predictions use: enum -> the choice; boolean -> "true"/"false"; multi -> sorted list
    in schema order. Raises BadCase when the label is outside the schema."""
    if field.type == "boolean":
        if not isinstance(value, bool):
            raise BadCase(f"label of boolean field '{field.name}' must be true or false, got {value!r}")
        return "true" if value else "false"
    if field.type == "enum":
        if value not in field.values:
            raise BadCase(f"label {value!r} of field '{field.name}' is not one of its choices {list(field.values)}")
        return value
    if not isinstance(value, list) or any(v not in field.values for v in value):
        raise BadCase(f"label {value!r} of multi field '{field.name}' must be a list of its choices {list(field.values)}")
    return [v for v in field.values if v in value]


def check_case(case: Case) -> tuple[DecisionSchema, dict]:
    """(schema, gold labels keyed as predictions key them), or BadCase naming what is wrong."""
    if not case.context.strip():
        raise BadCase(f"case {case.id}: context is empty")
    try:
        schema = DecisionSchema.from_dict(case.schema)
    except TypedLMError as e:
        raise BadCase(f"case {case.id}: {e}") from e
    missing = [f.name for f in schema.fields if f.name not in case.labels]
    extra = sorted(set(case.labels) - set(schema.names))
    if missing or extra:
        raise BadCase(f"case {case.id}: labels must name every field exactly: missing {missing}, unknown {extra}")
    try:
        gold = {f.name: gold_key(f, case.labels[f.name]) for f in schema.fields}
    except BadCase as e:
        raise BadCase(f"case {case.id}: {e}") from e
    return schema, gold


def case_line(case: Case) -> str:
    return canonical_json(case.to_dict())


def data_sha256(cases: list[Case]) -> str:
    h = hashlib.sha256()
    for c in cases:
        h.update(case_line(c).encode())
        h.update(b"\n")
    return h.hexdigest()


def write_cases(path: Path, cases: list[Case]) -> dict:
    path = Path(path)
    path.write_text("".join(case_line(c) + "\n" for c in cases), encoding="utf-8")
    lock = {"sha256": data_sha256(cases), "cases": len(cases)}
    Path(str(path) + ".lock").write_text(json.dumps(lock, indent=2) + "\n")
    return lock


def read_cases(path: Path) -> list[Case]:
    """Cases from a JSONL file; its ``.lock`` (when present) must match the data."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TypedLMError(f"cannot read cases file '{path}': {e.strerror or e}") from e
    cases, seen = [], set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise TypedLMError(f"{path}:{n}: not valid JSON: {e}") from e
        c = case_from_dict(d, f"{path}:{n}")
        if c.id in seen:
            raise TypedLMError(f"{path}:{n}: duplicate case id {c.id!r}")
        seen.add(c.id)
        cases.append(c)
    if not cases:
        raise TypedLMError(f"cases file '{path}' has no cases")
    lock_path = Path(str(path) + ".lock")
    if lock_path.exists():
        want = json.loads(lock_path.read_text()).get("sha256")
        got = data_sha256(cases)
        if want != got:
            raise TypedLMError(f"cases file '{path}' does not match its lock {lock_path.name} "
                               f"(sha256 {got[:12]}… vs {str(want)[:12]}…): the data changed")
    return cases


def select(cases: list[Case], split: str, limit: int | None) -> list[Case]:
    """Cases of one split (``all``: every split) in a fixed order (seeded hash of the id), the first ``limit``."""
    if split != "all" and split not in SPLITS:
        raise TypedLMError(f"split must be one of {', '.join(SPLITS)} or all, got {split!r}")
    chosen = [c for c in cases if split == "all" or c.split == split]
    chosen.sort(key=lambda c: (hash_unit(c.id, "order"), c.id))
    return chosen[:limit] if limit is not None else chosen


def with_examples(cases: list[Case], all_cases: list[Case], k: int) -> list[Case]:
    """``cases`` with the first ``k`` train-split cases (seeded order) of ``all_cases`` added to each schema as
    few-shot examples (``typedlm eval --examples K``; rendered in the shared prompt prefix)."""
    if k < 0:
        raise TypedLMError(f"--examples must be at least 0, got {k}")
    if k == 0:
        return cases
    train = select(all_cases, "train", k)
    if len(train) < k:
        raise TypedLMError(f"--examples {k}: the train split has {len(train)} cases")
    ex = [{"context": c.context, "labels": c.labels} for c in train]
    return [replace(c, schema={**c.schema, "examples": ex}) for c in cases]
