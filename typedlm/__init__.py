"""typedlm: typed outputs from local language models."""

from .engine import Engine, engine_from_model, load_engine
from .errors import ConstraintError, GrammarCompileError, ModelLoadError, TypedLMError
from .generate import GenerationResult, SamplingParams, generate
from .decide import decide, decide_many

__version__ = "0.1.0"

__all__ = ["ConstraintError", "Engine", "GenerationResult", "GrammarCompileError", "ModelLoadError",
           "SamplingParams", "TypedLMError", "decide", "decide_many", "engine_from_model", "generate", "load_engine"]
