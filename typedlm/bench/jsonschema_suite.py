"""The official JSON-Schema-Test-Suite (drafts 4, 6, 7, 2019-09, 2020-12) run through typedlm's schema path.

Cases of the older drafts carry no ``$schema``; the runner adds the draft's meta-schema URI to each
object schema (what a user of that draft writes), so the draft is detected as in production.

For every case the schema goes through ``make_constraint(json_schema=..., strict=False,
any_whitespace=False)`` and ``Grammars.compile`` (refusal layer and rewrites included). Every test
instance is rendered as the grammar would emit it (:func:`typedlm.grammar.renderings.renderings`) and an xgrammar
``GrammarMatcher`` is asked whether it accepts the whole text and can stop there. Each test is one of:

=================  ==========================================================
``pass``           valid and accepted, or invalid and rejected
``false_negative`` valid but rejected (the grammar is stricter than the schema)
``false_positive`` invalid but accepted (a soundness bug: must stay at 0)
``refused``        the refusal layer named an unenforceable keyword
``compile_error``  any other compile failure (xgrammar error, time limit)
=================  ==========================================================

A schema the rewrites prove empty (``false``, contradicting constraints) raises
``EmptySchemaError``: no output is possible, which is right for every invalid instance (``pass``)
and wrong for a valid one (``false_negative``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import json
from pathlib import Path
import time
from typing import Any, Iterator

import referencing
from rich.console import Console
from rich.table import Table

from .. import config
from ..engine import grammar_options
from ..errors import EmptySchemaError, GrammarCompileError
from ..grammar.compiler import Grammars
from ..grammar.controller import accepts_text
from ..grammar.renderings import renderings
from ..grammar.schema import prepare_schema
from ..grammar.schema.drafts import DRAFTS as KNOWN
from ..grammar.spec import make_constraint
from ..testing import default_tokenizer
from .suite_files import DEFAULT_SUITE, DRAFTS, GROUPS

OUTCOMES = ("pass", "false_negative", "false_positive", "refused", "compile_error")


# ---------------------------------------------------------------- suite files

@dataclass
class Case:
    group: str  # required | optional
    file: str  # path relative to the draft folder
    description: str
    schema: Any
    tests: list[dict]
    draft: str = "draft2020-12"


def _with_draft(schema: Any, draft: str) -> Any:
    if isinstance(schema, dict) and "$schema" not in schema:
        return {"$schema": KNOWN[draft].validator.META_SCHEMA["$schema"], **schema}
    return schema


def load_suite(suite: Path, draft: str = "draft2020-12") -> list[Case]:
    root = Path(suite) / "tests" / draft
    if not root.is_dir():
        raise FileNotFoundError(f"no {draft} tests under '{suite}' (expected {root})")
    cases = []
    for path in sorted(root.rglob("*.json")):
        rel = path.relative_to(root).as_posix()
        group = "optional" if rel.startswith("optional/") else "required"
        for c in json.loads(path.read_text(encoding="utf-8")):
            cases.append(Case(group, rel, c["description"], _with_draft(c["schema"], draft), c["tests"], draft))
    return cases


# ---------------------------------------------------------------- running

@dataclass
class TestResult:
    group: str
    file: str
    case: str
    test: str
    valid: bool
    outcome: str
    detail: str = ""
    keyword: str | None = None


@dataclass
class SuiteReport:
    results: list[TestResult] = field(default_factory=list)
    seconds: float = 0.0

    def totals(self, group: str) -> dict[str, int]:
        rows = [r for r in self.results if r.group == group]
        out = {"total": len(rows)}
        out.update({o: sum(r.outcome == o for r in rows) for o in OUTCOMES})
        return out

    def by_file(self) -> dict[str, dict[str, int]]:
        files: dict[str, dict[str, int]] = {}
        for r in self.results:
            row = files.setdefault(r.file, {"total": 0, **{o: 0 for o in OUTCOMES}})
            row["total"] += 1
            row[r.outcome] += 1
        return dict(sorted(files.items()))

    def gaps_by_keyword(self) -> dict[str, int]:
        """Tests not passing, by the refused keyword (or the outcome when nothing was refused)."""
        gaps: dict[str, int] = {}
        for r in self.results:
            if r.group == "required" and r.outcome != "pass":
                k = r.keyword or f"({r.outcome}) {r.file.removesuffix('.json')}"
                gaps[k] = gaps.get(k, 0) + 1
        return dict(sorted(gaps.items(), key=lambda kv: -kv[1]))

    def to_dict(self) -> dict:
        return {**{g: self.totals(g) for g in GROUPS}, "files": self.by_file(),
                "gaps_by_keyword": self.gaps_by_keyword(), "seconds": round(self.seconds, 2)}


REMOTE_BASE = "http://localhost:1234/"  # where the suite's remote $refs point


def remotes_registry(suite: Path = DEFAULT_SUITE, draft: str = "draft2020-12"):
    """The suite's ``remotes/`` folder as a ``referencing.Registry`` (never the network); a document
    without a ``$schema`` is read as the draft of its folder (``remotes/draft7/``), else as ``draft``."""
    resources = []
    root = Path(suite) / "remotes"
    for path in sorted(root.rglob("*.json")) if root.is_dir() else []:
        contents = json.loads(path.read_text(encoding="utf-8"))
        rel = path.relative_to(root).as_posix()
        res = referencing.Resource.from_contents(
            contents, default_specification=KNOWN.get(rel.split("/")[0], KNOWN[draft]).spec)
        try:
            referencing.Registry().with_resource(REMOTE_BASE + rel, res).crawl()
        except TypeError:  # a later draft's document (boolean subschemas) read as draft 4
            res = referencing.Resource.from_contents(contents, default_specification=KNOWN["draft2020-12"].spec)
        resources.append((REMOTE_BASE + rel, res))
    return referencing.Registry().with_resources(resources)


def default_grammars(suite: Path = DEFAULT_SUITE, draft: str = "draft2020-12", engine: str | None = None):
    """The default model's tokenizer; ``engine``: the grammar engine (None: the configured one)."""
    tok = default_tokenizer()
    options = {**grammar_options(config.settings()), **({"engine": engine} if engine else {})}
    return Grammars.for_tokenizer(tok, model_vocab_size=len(tok), stop_ids=[tok.eos_token_id],
                                  schema_registry=remotes_registry(suite, draft), **options)


def accepts(compiled, text: str) -> bool:
    """Whether the grammar accepts the whole ``text`` and may stop right after it (the matcher stays in
    the grammar package: :func:`typedlm.grammar.controller.accepts_text`)."""
    return accepts_text(compiled, text)


def run_case(case: Case, grammars) -> Iterator[TestResult]:
    compiled, outcome, detail, keyword, empty = None, None, "", None, False
    try:
        c = make_constraint(json_schema=case.schema, strict=False, any_whitespace=False)
        compiled, _ = grammars.compile(c)
        # what the grammar emits, for its key order (the automata only xgrammar's grammar reads are not needed)
        core = prepare_schema(c.value, registry=grammars.schema_registry, automata=False)
    except EmptySchemaError as e:
        empty, detail = True, str(e)
    except GrammarCompileError as e:
        keyword = getattr(e, "keyword", None)
        outcome = "refused" if keyword else "compile_error"
        detail = str(e)
    for t in case.tests:
        if empty:  # proven to accept nothing: right for invalid instances, wrong for valid ones
            out = "false_negative" if t["valid"] else "pass"
        elif compiled is None:
            out = outcome
        else:
            ok = any(accepts(compiled, text) for text in renderings(t["data"], core, case.draft != "draft4"))
            out = "pass" if ok == t["valid"] else ("false_negative" if t["valid"] else "false_positive")
        yield TestResult(case.group, case.file, case.description, t["description"], t["valid"], out, detail,
                         keyword)


def run_suite(suite: Path = DEFAULT_SUITE, grammars=None, draft: str = "draft2020-12",
              engine: str | None = None) -> SuiteReport:
    grammars = grammars or default_grammars(suite, draft, engine)
    t0 = time.perf_counter()
    report = SuiteReport()
    for case in load_suite(suite, draft):
        report.results.extend(run_case(case, grammars))
    report.seconds = time.perf_counter() - t0
    return report


# ---------------------------------------------------------------- ratchet

def ratchet_of(report: SuiteReport, draft: str) -> dict:
    """Expected counts per file (and totals): what the ratchet test holds the suite to."""
    return {"suite": f"JSON-Schema-Test-Suite {draft}", "totals": {g: report.totals(g) for g in GROUPS},
            "files": report.by_file()}


def ratchet_problems(report: SuiteReport, ratchet: dict) -> list[str]:
    """Every false positive, every drop in passes and every rise not yet written into the ratchet."""
    problems = [f"false positive: {r.file} | {r.case} | {r.test}" for r in report.results
                if r.outcome == "false_positive"]
    now = report.by_file()
    for name, want in ratchet["files"].items():
        got = now.get(name, {}).get("pass", 0)
        if got < want["pass"]:
            problems.append(f"{name}: {got} passes, the ratchet expects {want['pass']}")
        elif got > want["pass"]:
            problems.append(f"{name}: {got} passes > {want['pass']} in the ratchet: update it in this commit "
                            "(typedlm bench jsonschema-suite --draft all --write-ratchet tests/data/jsonschema_ratchet)")
    problems += [f"{name}: not in the ratchet" for name in now if name not in ratchet["files"]]
    return problems


# ---------------------------------------------------------------- CLI

def _table(report: SuiteReport, draft: str) -> None:
    table = Table(title=f"JSON-Schema-Test-Suite {draft} through typedlm")
    table.add_column("file")
    for col in ("total", *OUTCOMES):
        table.add_column(col.replace("_", " "), justify="right")
    for name, row in report.by_file().items():
        fp = row["false_positive"]
        table.add_row(name, *(str(row[c]) for c in ("total", *OUTCOMES[:2])),
                      f"[red]{fp}[/red]" if fp else "0", *(str(row[c]) for c in OUTCOMES[3:]))
    table.add_section()
    for g in GROUPS:
        t = report.totals(g)
        pct = 100.0 * t["pass"] / t["total"] if t["total"] else 0.0
        table.add_row(f"[bold]{g}[/bold] ({pct:.1f} % pass)", *(str(t[c]) for c in ("total", *OUTCOMES)))
    Console(stderr=True, width=140).print(table)
