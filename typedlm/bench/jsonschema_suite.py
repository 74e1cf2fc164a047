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

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from ..grammar.renderings import renderings

OUTCOMES = ("pass", "false_negative", "false_positive", "refused", "compile_error")
GROUPS = ("required", "optional")
# The repository's copy (test data, not in the wheel); elsewhere pass a checkout of the suite (``--suite``).
DEFAULT_SUITE = Path(__file__).resolve().parents[2] / "tests" / "data" / "json-schema-test-suite"
DRAFTS = ("draft4", "draft6", "draft7", "draft2019-09", "draft2020-12")


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
    from ..grammar.schema.drafts import DRAFTS as KNOWN

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
    import referencing

    from ..grammar.schema.drafts import DRAFTS as KNOWN

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
    from .. import config
    from ..engine import grammar_options
    from ..grammar.compiler import Grammars
    from ..testing import default_tokenizer

    tok = default_tokenizer()
    options = {**grammar_options(config.settings()), **({"engine": engine} if engine else {})}
    return Grammars.for_tokenizer(tok, model_vocab_size=len(tok), stop_ids=[tok.eos_token_id],
                                  schema_registry=remotes_registry(suite, draft), **options)


def accepts(compiled, text: str) -> bool:
    """Whether the grammar accepts the whole ``text`` and may stop right after it (the matcher stays in
    the grammar package: :func:`typedlm.grammar.controller.accepts_text`)."""
    from ..grammar.controller import accepts_text

    return accepts_text(compiled, text)


def run_case(case: Case, grammars) -> Iterator[TestResult]:
    from ..errors import EmptySchemaError, GrammarCompileError
    from ..grammar.schema import prepare_schema
    from ..grammar.spec import make_constraint

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
    from rich.console import Console
    from rich.table import Table

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


def register(app, bench_app) -> None:
    import typer

    from ..cliutil import fail, print_json, user_errors

    @bench_app.command("jsonschema-suite")
    def jsonschema_suite(
        suite: Path = typer.Option(DEFAULT_SUITE, "--suite", help="JSON-Schema-Test-Suite checkout"),
        draft: str = typer.Option("all", "--draft", help=f"one of {', '.join(DRAFTS)}, or all"),
        out: Optional[Path] = typer.Option(None, "--json", help="write the totals and per-file counts here"),
        write_ratchet: Optional[Path] = typer.Option(
            None, "--write-ratchet", help="write the per-file counts to <this folder>/<draft>.json "
                                          "(the repo's ratchets: tests/data/jsonschema_ratchet/)"),
        tables: bool = typer.Option(True, "--table/--no-table", help="print a per-file table per draft"),
        grammar_engine: Optional[str] = typer.Option(
            None, "--grammar-engine", help="xgrammar | llguidance | auto (default: TYPEDLM_GRAMMAR_ENGINE, else "
                                           "xgrammar); ratchets per engine: tests/data/jsonschema_ratchet/<engine>/"),
    ):
        """Run the official JSON Schema suite through the grammar path, per draft; table + JSON."""
        drafts = DRAFTS if draft == "all" else (draft,)
        if draft != "all" and draft not in DRAFTS:
            fail(f"--draft must be one of {', '.join(DRAFTS)} or all, not {draft!r}")
        reports = {}
        with user_errors():
            for d in drafts:
                if not (Path(suite) / "tests" / d).is_dir():
                    fail(f"--suite '{suite}' has no tests/{d} folder: pass a JSON-Schema-Test-Suite checkout")
            for d in drafts:
                reports[d] = run_suite(suite, draft=d, engine=grammar_engine)
        data = {d: r.to_dict() for d, r in reports.items()}
        for d, r in reports.items():
            if tables:
                _table(r, d)
        if out is not None:
            with user_errors():
                Path(out).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        if write_ratchet is not None:
            fps = {d: sum(r.totals(g)["false_positive"] for g in GROUPS) for d, r in reports.items()}
            if any(fps.values()):
                fail(f"false positives {fps}: a ratchet never records a false positive")
            with user_errors():
                Path(write_ratchet).mkdir(parents=True, exist_ok=True)
                for d, r in reports.items():
                    (Path(write_ratchet) / f"{d}.json").write_text(json.dumps(ratchet_of(r, d), indent=1) + "\n",
                                                                   encoding="utf-8")
        print_json({d: {g: data[d][g] for g in GROUPS} | {"seconds": data[d]["seconds"]} for d in data})
