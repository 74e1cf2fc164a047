"""Constrained generation: sampling, the per-row sequence rules, the decode loop, the public API."""

from .api import build_sequence, default_engine, generate
from .result import GenerationResult, check_schema, finish_result
from .sampling import SamplingParams

__all__ = ["GenerationResult", "SamplingParams", "build_sequence", "check_schema", "default_engine",
           "finish_result", "generate"]
