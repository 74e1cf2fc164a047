"""`make demo`: structured generation on the embedded default model and one typed decision."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .decide import presets
from .decide.api import decide
from .decide.result import format_value
from .engine import load_engine
from .generate import generate

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
        "employed": {"type": "boolean"},
    },
    "required": ["name", "age", "languages", "employed"],
    "additionalProperties": False,
}


def demo_decision(engine=None, preset: str = "support_triage", example: int = 0) -> dict:
    """Decide a bundled preset's example with one prefill and batched scoring; print a table; return the
    Decision as JSON-ready dict."""
    p = presets.load(preset)
    context = p["examples"][example]
    d = decide(p["schema"], context, engine=engine)
    console = Console()
    console.print(f"[bold]typedlm decide[/bold] — preset [cyan]{preset}[/cyan] ({len(d.fields)} fields)")
    console.print(f"[dim]{context}[/dim]")
    table = Table()
    for col in ("field", "value", "p", "runner-up"):
        table.add_column(col)
    for name, f in d.fields.items():
        alt = f.alternatives[0] if f.alternatives else None
        alt_s = f"{format_value(alt['value'])} {alt['probability']:.2f}" if alt else ""
        p = "" if f.probability is None else f"{f.probability:.2f}"
        table.add_row(name, format_value(f.value) + (f" [{f.reason}]" if f.reason else ""), p, alt_s)
    console.print(table)
    t, u = d.timings, d.usage
    console.print(f"{u['prompt_tokens']} prompt tokens prefilled once; {u['rows']} candidate rows scored in "
                  f"{u['passes']} batched pass(es): prefill {t['prefill']*1e3:.0f} ms + scoring "
                  f"{t['scoring']*1e3:.0f} ms")
    return d.to_dict()


def main() -> int:
    console = Console()
    console.print("[bold]typedlm demo[/bold] — loading the embedded default model (SmolLM2-135M-Instruct)…")
    engine = load_engine("default")
    console.print(f"loaded {engine.name} on {engine.device} in {engine.load_seconds:.1f} s")
    ok = True

    msgs = [{"role": "user", "content": "Maria is a 34-year-old engineer who speaks Spanish and English. "
                                        "Describe her as JSON."}]
    r = generate(messages=msgs, engine=engine, json_schema=SCHEMA, temperature=0, max_tokens=120)
    console.print("\n[bold]json_schema[/bold] (name, age, languages, employed)")
    console.print(r.text, markup=False, highlight=False)
    console.print(f"finish={r.finish_reason} schema_valid={r.schema_valid} tokens={r.completion_tokens} "
                  f"decode={r.timings['decode']:.2f}s")
    ok &= bool(r.schema_valid)

    r = generate(messages=[{"role": "user", "content": "Invent a flight number."}], engine=engine,
                 regex=r"[A-Z]{2}\d{3,4}", temperature=0)
    console.print("\n[bold]regex[/bold]", escape(r"[A-Z]{2}\d{3,4} → " + r.text), highlight=False)

    r = generate(messages=[{"role": "user", "content": "Is Paris in France? Answer yes or no."}],
                 engine=engine, choice=["yes", "no"], temperature=0)
    console.print("[bold]choice[/bold]", escape("yes|no → " + r.text), highlight=False)

    console.print()
    demo_decision(engine)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
