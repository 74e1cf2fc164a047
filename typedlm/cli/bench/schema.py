"""``typedlm bench`` commands of JSON Schema: the official test suite and compile times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ...bench.suite_files import DEFAULT_SUITE, DRAFTS, GROUPS
from ..util import fail, print_json, user_errors


def jsonschema_suite(
    suite: Path = typer.Option(DEFAULT_SUITE, "--suite", help="JSON-Schema-Test-Suite checkout"),
    draft: str = typer.Option("all", "--draft", help=f"one of {', '.join(DRAFTS)}, or all"),
    out: Optional[Path] = typer.Option(None, "--json", help="write the totals and per-file counts here"),
    write_ratchet: Optional[Path] = typer.Option(
        None, "--write-ratchet", help="write the per-file counts to <this folder>/<draft>.json "
                                      "(the repo's ratchets: tests/data/jsonschema_ratchet/)"),
    tables: bool = typer.Option(True, "--table/--no-table", help="print a per-file table per draft"),
    grammar_engine: Optional[str] = typer.Option(
        None, "--grammar-engine", help="handoff | xgrammar | llguidance | auto (default: TYPEDLM_GRAMMAR_ENGINE, "
                                       "else handoff); ratchets per engine: tests/data/jsonschema_ratchet/<engine>/"),
):
    """Run the official JSON Schema suite through the grammar path, per draft; table + JSON."""
    from ...bench.jsonschema_suite import _table, ratchet_of, run_suite  # lazy: CLI start-up

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


def schema_compile(
    draft: str = typer.Option("draft2020-12", "--draft", help="the suite draft whose schemas are timed"),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help='JSON lines of {"schema": ...} instead'),
    suite: Path = typer.Option(DEFAULT_SUITE, "--suite", help="JSON-Schema-Test-Suite checkout"),
    out: Optional[Path] = typer.Option(None, "--json", help="write the result here"),
):
    """Time the normalizer, our EBNF and xgrammar's compile apart, per schema; quantiles + slowest."""
    from ...bench.jsonschema_suite import load_suite, remotes_registry  # lazy: CLI start-up
    from ...bench.schema_compile import split_times  # lazy: CLI start-up

    with user_errors():
        if corpus is not None:
            schemas = [json.loads(line)["schema"] for line in Path(corpus).read_text().splitlines() if line]
            registry = None
        else:
            schemas = [c.schema for c in load_suite(suite, draft)]
            registry = remotes_registry(suite, draft)
        result = split_times(schemas, registry)
        if out is not None:
            Path(out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print_json(result)
