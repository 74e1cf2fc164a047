"""The few log-space helpers every decide step shares (one definition each)."""

from __future__ import annotations

import math
from typing import Sequence


def log_softmax(x: Sequence[float]) -> list[float]:
    m = max(x)
    z = m + math.log(sum(math.exp(v - m) for v in x))
    return [v - z for v in x]


def softmax(x: Sequence[float]) -> list[float]:
    return [math.exp(v) for v in log_softmax(x)]


def log_sigmoid(z: float) -> float:
    return -math.log1p(math.exp(-z)) if z >= 0 else z - math.log1p(math.exp(z))
