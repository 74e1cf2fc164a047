"""Sampling parameters (validated) and the one helper for small host lists on the device.

The batched logits pipeline that uses them is :class:`typedlm.generate.sampler.BatchSampler`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..errors import ConstraintError

LogitsProcessor = Callable[[list[int], torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # sparse (token id, bias) pairs, OpenAI's logit_bias
    logits_processors: tuple[LogitsProcessor, ...] = field(default=(), compare=False)

    def __post_init__(self):
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop or ()))
        object.__setattr__(self, "logits_processors", tuple(self.logits_processors or ()))
        bias = self.logit_bias.items() if isinstance(self.logit_bias, dict) else (self.logit_bias or ())
        object.__setattr__(self, "logit_bias", tuple(sorted((int(t), float(b)) for t, b in bias)))
        checks = [
            (isinstance(self.max_tokens, int) and self.max_tokens >= 1, "max_tokens must be an integer >= 1"),
            (0.0 <= self.temperature <= 100.0, "temperature must be in [0, 100]"),
            (0.0 < self.top_p <= 1.0, "top_p must be in (0, 1]"),
            (isinstance(self.top_k, int) and self.top_k >= 0, "top_k must be an integer >= 0 (0 = off)"),
            (self.repetition_penalty > 0.0, "repetition_penalty must be > 0"),
            (all(isinstance(s, str) and s for s in self.stop), "stop strings must be non-empty strings"),
            (self.seed is None or isinstance(self.seed, int), "seed must be an integer"),
            (all(t >= 0 and -100.0 <= b <= 100.0 for t, b in self.logit_bias),
             "logit_bias maps token ids >= 0 to biases in [-100, 100]"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConstraintError(msg)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def truncating(self) -> bool:
        return bool(self.top_k) or self.top_p < 1.0
