"""A resumable evaluation run in one folder.

Files:
  manifest.json      the settings, written FIRST; ``--resume`` refuses a run whose settings differ
  run.lock           one writer: ``{"pid"}``; a lock whose process is dead is broken, a live one refuses
  predictions.jsonl  one line per field decision (``PREDICTION_KEYS``)
  journal.jsonl      one line per finished case: ``{"case_id", "status": "done"|"skipped", "reason"}``
  run.json           manifest + provenance + status (``running`` / ``done`` / ``circuit_open`` /
                     ``interrupted``: SIGINT or SIGTERM, resumable / ``failed``: every case skipped), counts,
                     skipped cases with reasons, the circuit breaker's reason
  timing.json        per track/mode: cases, field decisions, seconds, p50/p95 case latency, decisions/s

Order of writes per case: its prediction lines are appended and fsynced, THEN its journal entry. On resume,
prediction lines of cases without a journal entry (killed in between) are dropped, so every case ends up
exactly once. A torn last line (killed mid-write) is dropped too.

Failures: a bad case (empty context, labels outside the schema, a request the server refuses with 4xx) is
journaled ``skipped`` with its reason and the run goes on. An infrastructure failure (connection refused,
timeout, 5xx) leaves the case unjournaled (a resume retries it); after ``BREAKER_LIMIT`` consecutive ones the
run stops with ``status: circuit_open`` and the reason in run.json.

``predictions.jsonl``, one line per field decision (``PREDICTION_KEYS``, pinned by
``tests/eval/test_run.py::test_prediction_lines_contract``; the calibrators read it):

| key | meaning |
|---|---|
| `run_id`, `track`, `mode`, `dataset`, `split`, `case_id`, `group_id` | origin; `mode`: `labels`/`slots`/`json`/`logprobs` |
| `field`, `field_type`, `choices` | `boolean` (choices `true`, `false`) / `enum` / `multi`; choices in schema order |
| `gold`, `pred`, `correct` | choice keys (multi: lists in schema order; `pred` null = no legal answer) |
| `probabilities` | scalar `{choice: p}`; multi `{option: P(yes)}`; naive: 1.0 on its answer |
| `scores` | probabilities = their softmax: scalar `{choice: log-score}`, multi `{option: [yes, no]}` (parallel: constrained log-probs; openai: log top-k mass; naive: null) |
| `legal_mass`, `truncated`, `violation`, `error` | a choice got the top-k floor; the model's own answer was illegal |
| `latency_s`, `case_latency_s`, `permutation` | the answering call; all calls of the case for this track; shown choice order (null = schema order) |
| `record` | parallel: how decide made the number (`score_source`, `temperature`, `calibrator`, `prior`, `constraint_changed`); else null |

Decision: the committed CPU runs (``bench/scripts/eval_cpu.sh``) use ``OMP_NUM_THREADS=1``: one decide on a 202-token
prompt took 3.9 s with 1 torch thread vs 40 s with 2 on the shared 2-core machine at load ~10.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import statistics
import time
from typing import Callable
import uuid

from ..decide.prior import batch_chunks
from ..errors import TypedLMError
from .cases import Case, check_case
from .tracks import FieldAnswer, InfraError, choice_keys, permuted_schema

BREAKER_LIMIT = 5
PREDICTION_KEYS = ("run_id", "track", "mode", "case_id", "group_id", "dataset", "split", "field", "field_type",
                   "choices", "gold", "pred", "probabilities", "scores", "correct", "legal_mass", "latency_s",
                   "case_latency_s", "permutation", "truncated", "violation", "error", "record")
MANIFEST_COMPARED = ("dataset", "data_sha256", "split", "limit", "cases", "tracks", "flip", "model",
                     "model_sha256", "prompts", "chunk", "examples")


class RunError(TypedLMError):
    """The run folder cannot be used as asked (exists without --resume, other settings, locked)."""


# -- files -------------------------------------------------------------------------------------------
def _append(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))
        fh.flush()
        os.fsync(fh.fileno())


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict]:
    """Lines of a JSONL file; a torn last line (no newline, not JSON) is ignored."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """One writer per run folder (``run.lock`` holds the pid; created with O_EXCL)."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / "run.lock"
        self.held = False

    def acquire(self) -> None:
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    pid = int(json.loads(self.path.read_text()).get("pid"))
                except (ValueError, OSError, TypeError, AttributeError):
                    pid = None
                if pid is not None and _pid_alive(pid):
                    raise RunError(f"run folder {self.path.parent} is locked by process {pid} (still running)")
                self.path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps({"pid": os.getpid(), "since": time.time()}))
            self.held = True
            return
        raise RunError(f"cannot take the lock {self.path}")

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


# -- lines -------------------------------------------------------------------------------------------
def _correct(field_type: str, gold, pred) -> bool:
    if pred is None:
        return False
    return sorted(gold) == sorted(pred) if field_type == "multi" else gold == pred


def prediction_line(*, run_id: str, track: str, mode: str, case: Case, dataset: str, gold: dict, answer: FieldAnswer,
                    case_latency_s: float, permutation: list | None) -> dict:
    g = gold[answer.field]
    line = {"run_id": run_id, "track": track, "mode": mode, "case_id": case.id, "group_id": case.group_id,
            "dataset": dataset, "split": case.split, "field": answer.field, "field_type": answer.field_type,
            "choices": answer.choices, "gold": g, "pred": answer.pred, "probabilities": answer.probabilities,
            "scores": answer.scores, "correct": _correct(answer.field_type, g, answer.pred),
            "legal_mass": answer.legal_mass, "latency_s": answer.latency_s, "case_latency_s": case_latency_s,
            "permutation": permutation, "truncated": answer.truncated, "violation": answer.violation,
            "error": answer.error, "record": answer.record}
    assert tuple(line) == PREDICTION_KEYS
    return line


# -- the run -----------------------------------------------------------------------------------------
class Run:
    def __init__(self, folder: Path, manifest: dict, tracks: list, *, provenance: dict | None = None,
                 answerer: Callable | None = None):
        self.answerer = answerer or answer_cases
        self.folder = Path(folder)
        self.manifest = manifest
        self.tracks = tracks
        self.provenance = provenance or {}
        self.preds = self.folder / "predictions.jsonl"
        self.journal = self.folder / "journal.jsonl"

    # manifest first; on resume it must match
    def open(self, resume: bool) -> set[str]:
        self.folder.mkdir(parents=True, exist_ok=True)
        mpath = self.folder / "manifest.json"
        if mpath.exists():
            if not resume:
                raise RunError(f"{self.folder} already holds a run: add --resume to continue it, or use another --out")
            old = json.loads(mpath.read_text())
            diff = [k for k in MANIFEST_COMPARED if old.get(k) != self.manifest.get(k)]
            if diff:
                raise RunError(f"cannot resume {self.folder}: settings differ in {', '.join(diff)} "
                               "(a run with other settings is refused, not mixed)")
            self.manifest["run_id"] = old["run_id"]
            return self._recover()
        if resume and any(self.folder.iterdir()):
            raise RunError(f"{self.folder} has no manifest.json: nothing to resume")
        self.manifest["run_id"] = self.manifest.get("run_id") or uuid.uuid4().hex[:12]
        _write_json(mpath, self.manifest)
        return set()

    def _recover(self) -> set[str]:
        entries = read_jsonl(self.journal)
        done = {e["case_id"] for e in entries}
        done_ok = {e["case_id"] for e in entries if e.get("status") == "done"}
        lines = read_jsonl(self.preds)
        keep = [ln for ln in lines if ln.get("case_id") in done_ok]
        for path, rows in ((self.preds, keep), (self.journal, entries)):
            tmp = path.with_suffix(".tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        self.recovered = {"journal": len(entries), "lines_dropped": len(lines) - len(keep)}
        return done

    def write_status(self, **status) -> None:
        _write_json(self.folder / "run.json", {**self.manifest, "provenance": self.provenance, **status})

    def _warm_up(self, todo: list[Case]) -> None:
        """One untimed call per track on the first case to do, so plan / grammar compiles and first-call costs
        do not land in the first case's latency."""
        for case in todo[:1]:
            for track in self.tracks:
                try:
                    check_case(case)
                    track.answer(case.schema, case.context)
                except TypedLMError:
                    pass  # the loop reports it

    def execute(self, cases: list[Case], done: set[str], *,
                on_case: Callable[[int, int, dict], None] | None = None) -> dict:
        skipped = [e for e in read_jsonl(self.journal) if e.get("status") == "skipped"]
        n_done = len(done)
        acc: dict = {}
        started = time.time()
        self.write_status(status="running", started=started)
        todo = [c for c in cases if c.id not in done]
        if on_case:
            on_case(n_done, len(cases), acc)
        try:
            self._warm_up(todo)
            n_done, reason, status = self._loop(todo, cases, acc, skipped, n_done, on_case)
            if status == "done" and cases and len(skipped) >= len(cases):
                status = "failed"
                reason = f"every case was skipped ({len(skipped)} of {len(cases)}); the first: {skipped[0]['reason']}"
        except KeyboardInterrupt:  # SIGINT (and SIGTERM, via the CLI): stop cleanly, resumable
            status, reason = "interrupted", "interrupted (SIGINT/SIGTERM); continue with --resume"
            n_done = len(read_jsonl(self.journal))
        timing = timing_summary(read_jsonl(self.preds))
        _write_json(self.folder / "timing.json", timing)
        summary = {"status": status, "reason": reason if status != "done" else None, "started": started,
                   "finished": time.time(), "cases_total": len(cases), "cases_finished": n_done,
                   "skipped": skipped, "recovered": getattr(self, "recovered", None)}
        self.write_status(**summary)
        return summary

    def _loop(self, todo, cases, acc, skipped, n_done, on_case):
        streak, reason, status = 0, None, "done"
        for case, got in self.answerer(todo, self.tracks, self.manifest):
            if isinstance(got, InfraError):
                streak += 1
                reason = str(got)
                if streak >= BREAKER_LIMIT:
                    status = "circuit_open"
                    reason = f"{BREAKER_LIMIT} consecutive infrastructure failures; last: {got}"
                    break
                continue
            if isinstance(got, TypedLMError):  # BadCase, a schema the tokenizer cannot score, a 4xx: skip, report
                entry = {"case_id": case.id, "status": "skipped", "reason": str(got)}
                _append(self.journal, [json.dumps(entry, ensure_ascii=False)])
                skipped.append(entry)
                n_done += 1
                if on_case:
                    on_case(n_done, len(cases), acc)
                continue
            lines = got
            streak = 0
            _append(self.preds, [json.dumps(ln, ensure_ascii=False) for ln in lines])
            _append(self.journal, [json.dumps({"case_id": case.id, "status": "done"})])
            n_done += 1
            for ln in lines:
                if ln["permutation"] is None:
                    k = f"{ln['track']}/{ln['mode']}"
                    c, n = acc.get(k, (0, 0))
                    acc[k] = (c + ln["correct"], n + 1)
            if on_case:
                on_case(n_done, len(cases), acc)
        return n_done, reason, status


def case_lines(case: Case, tracks: list, manifest: dict, pre: dict | None = None) -> list[dict]:
    """Every track's prediction lines for one case; raises InfraError (retried on resume) or another
    TypedLMError (the case is skipped). ``pre``: unpermuted answers already computed for a chunk of cases
    (:func:`batched_answers`)."""
    run_id, dataset, flip = manifest["run_id"], manifest["dataset"], manifest["flip"]
    lines: list[dict] = []
    schema, gold = check_case(case)
    for ti, track in enumerate(tracks):
        variants = [(case.schema, None)]
        if flip and track.name == "parallel":
            variants.append(permuted_schema(case.schema, case.id))
        for schema_dict, order in variants:
            if order is not None and not order:
                continue  # nothing to permute (booleans only)
            if order is None and pre and (case.id, ti) in pre:
                answers, dt = pre[(case.id, ti)]
            else:
                t0 = time.perf_counter()
                answers = track.answer(schema_dict, case.context)
                dt = time.perf_counter() - t0
            for a in answers:
                if order is not None and a.field not in order:
                    continue  # a boolean in a permuted variant: not a permuted decision
                perm = order.get(a.field) if order is not None else None
                a.choices = choice_keys(schema[a.field])  # the schema's order; ``permutation`` = shown
                if a.field_type == "multi" and a.pred is not None:
                    a.pred = [c for c in a.choices if c in a.pred]
                lines.append(prediction_line(run_id=run_id, track=track.name, mode=track.mode, case=case,
                                             dataset=dataset, gold=gold, answer=a, case_latency_s=dt,
                                             permutation=perm))
    return lines


def answer_cases(cases: list[Case], tracks: list, manifest: dict):
    """The single-process answerer: ``(case, its lines or the TypedLMError it raised)``, one case after another.
    ``typedlm eval --ray`` swaps in :func:`typedlm.scale.eval.ray_answerer` (cases spread over model actors);
    the run's loop, the one writer of the journal, is the same. With ``manifest["chunk"]`` > 1, tracks that
    answer several cases at once do so per chunk first (one ``decide_many``: shared prefix, ``prior="batch"``);
    a last chunk of one joins the one before."""
    bounds = dict(batch_chunks(len(cases), manifest.get("chunk") or 1, "batch"))
    pre: dict = {}
    for n, case in enumerate(cases):
        if n in bounds:
            pre = batched_answers(cases[n:bounds[n]], tracks)
        try:
            yield case, case_lines(case, tracks, manifest, pre)
        except TypedLMError as e:
            yield case, e


def batched_answers(part: list[Case], tracks: list) -> dict:
    """The unpermuted answers of tracks that answer several cases at once (``answer_many``: one
    ``decide_many`` per chunk, sharing the prompt prefix and, with ``prior="batch"``, the prior):
    {(case id, track index): (answers, seconds per case)}. A chunk the track refuses is left to the
    per-case path, which skips the bad case by itself."""
    out: dict = {}
    for ti, track in enumerate(tracks):
        if not hasattr(track, "answer_many"):
            continue
        by_schema: dict = {}
        for case in part:
            try:
                check_case(case)
            except TypedLMError:
                continue
            by_schema.setdefault(json.dumps(case.schema, sort_keys=True), []).append(case)
        for group in by_schema.values():
            if len(group) < 2:
                continue
            t0 = time.perf_counter()
            try:
                got = track.answer_many(group[0].schema, [c.context for c in group])
            except TypedLMError:
                continue
            dt = (time.perf_counter() - t0) / len(group)
            out.update({(c.id, ti): (a, dt) for c, a in zip(group, got)})
    return out


def timing_summary(lines: list[dict]) -> dict:
    """Per track/mode: cases, field decisions, seconds (sum of case latencies), p50/p95 case latency, decisions/s."""
    per: dict = {}
    for ln in lines:
        key = f"{ln['track']}/{ln['mode']}" + ("/permuted" if ln["permutation"] is not None else "")
        d = per.setdefault(key, {"cases": {}, "decisions": 0})
        d["cases"][ln["case_id"]] = ln["case_latency_s"]
        d["decisions"] += 1
    out = {}
    for key, d in per.items():
        lat = sorted(d["cases"].values())
        total = sum(lat)
        out[key] = {"cases": len(lat), "field_decisions": d["decisions"], "seconds": total,
                    "p50_case_latency_s": statistics.median(lat),
                    "p95_case_latency_s": lat[min(len(lat) - 1, int(0.95 * len(lat)))],
                    "field_decisions_per_s": d["decisions"] / total if total > 0 else None}
    return out

