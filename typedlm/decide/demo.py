"""Decision part of ``make demo`` (called by ``typedlm.demo.main``)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from . import presets
from .api import decide
from .result import format_value


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
