"""Multi-label fields: independent P(yes) per option, reconciled with the count question when confident."""

from __future__ import annotations

COUNT_CONFIDENCE = 0.6  # the count question overrides the per-option threshold only at or above this


def reconcile(options: list[str], p_yes: dict[str, float], count_probs: dict[str, float]) -> list[str]:
    """Selected options (schema order): those with P(yes) >= 0.5; if the count question is confident
    (max probability >= COUNT_CONFIDENCE) and disagrees, the top-k options by P(yes) instead."""
    selected = [o for o in options if p_yes[o] >= 0.5]
    if count_probs:
        k_str, p = max(count_probs.items(), key=lambda kv: kv[1])
        k = int(k_str)
        if p >= COUNT_CONFIDENCE and k != len(selected):
            top = sorted(options, key=lambda o: -p_yes[o])[:k]
            selected = [o for o in options if o in top]
    return selected
