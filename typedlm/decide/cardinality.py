"""Set-size priors of multi-label fields, and the set rules that use them.

A multi field's selection ``S`` maximizes ``sum_{o in S} (log P(yes_o) - t) + sum_{o not in S} log P(no_o)
+ log p(|S|)`` (:mod:`typedlm.decide.constraints.joint`). The *set rule* says where ``log p(|S|)`` comes from:

| rule | ``log p(k)`` |
|---|---|
| ``threshold`` | 0 (each option alone: its log-odds against the threshold ``t``) |
| ``count`` | the model's count question ``"<field>.count"`` |
| ``cardinality`` | a set-size distribution: fitted on the calibration split's gold sets (:func:`fitted`), else :func:`default_prior` |

:data:`DEFAULT_WEIGHTS` favours one or two labels; sizes past it decay by half each. ``min_selected`` /
``max_selected`` are bounds of the solver, applied on top of any rule.
"""

from __future__ import annotations

import math
from typing import Sequence

SET_RULES = ("threshold", "count", "cardinality")
DEFAULT_SET_RULE = "cardinality"  # wins the most multi fields of the bundled datasets (docs/guides/decision-quality.md)
DEFAULT_WEIGHTS = (0.04, 0.56, 0.28, 0.08)  # p(0), p(1), p(2), p(3) before normalizing; then halving per size
SMOOTHING = 1.0  # add-one counts per size when fitting from gold sets


def _normalize(weights: Sequence[float]) -> list[float]:
    total = sum(weights)
    return [math.log(w / total) if w > 0 else -math.inf for w in weights]


def default_prior(n: int) -> list[float]:
    """log p(k), k = 0..n, for a field of ``n`` options without calibration data."""
    w = list(DEFAULT_WEIGHTS[:n + 1])
    while len(w) < n + 1:
        w.append(w[-1] / 2)
    return _normalize(w)


def fitted(sizes: Sequence[int], n: int) -> list[float]:
    """log p(k), k = 0..n, from gold set sizes (add-:data:`SMOOTHING` counts, so no size is impossible)."""
    counts = [SMOOTHING] * (n + 1)
    for s in sizes:
        counts[min(max(int(s), 0), n)] += 1
    return _normalize(counts)


def check_rule(rule: str) -> str:
    if rule not in SET_RULES:
        raise ValueError(f"set rule must be one of {', '.join(SET_RULES)}, got {rule!r}")
    return rule
