"""``typedlm.generate``: the Python entry point for constrained (or free) generation."""

from __future__ import annotations

import threading
from typing import Any

import torch

from ..engine import Engine, load_engine
from ..errors import TypedLMError
from ..grammar.controller import GrammarRow
from .spec_decode import JumpForward
from ..grammar.spec import Constraint, make_constraint
from .detokenize import Detokenizer
from .reasoning import ReasoningState
from .result import GenerationResult
from .sampling import SamplingParams
from .scheduler import run_batch
from .sequence import Sequence

_default: dict[str, Engine] = {}
_default_lock = threading.Lock()


def default_engine() -> Engine:
    """The embedded default model, loaded once per process."""
    with _default_lock:
        if "engine" not in _default:
            _default["engine"] = load_engine("default")
        return _default["engine"]


def build_sequence(engine: Engine, prompt_ids: list[int], params: SamplingParams,
                   constraint: Constraint | None, *, thinking: bool = False, reasoning_budget: int | None = None,
                   jump_forward: bool = False, compiled=None) -> Sequence:
    """Compile the constraint (cached) and make a ready-to-decode Sequence. Shared by every path.

    ``thinking``: the prompt leaves a reasoning block open (see :mod:`.reasoning`); the grammar starts
    after its end marker, which is forced after ``reasoning_budget`` tokens. ``jump_forward``: append
    the text the grammar forces without sampling (:mod:`typedlm.generate.spec_decode`).
    ``compiled``: an already compiled grammar for ``constraint`` (e.g. a relaxed superset grammar)."""
    if not prompt_ids:
        raise TypedLMError("the prompt is empty")
    if len(prompt_ids) >= engine.max_context:
        raise TypedLMError(f"prompt has {len(prompt_ids)} tokens; the model's context is {engine.max_context}")
    room = engine.max_context - len(prompt_ids)
    if params.max_tokens > room:
        params = SamplingParams(**{**params.__dict__, "max_tokens": room})
    bad = [t for t, _ in params.logit_bias if t >= engine.tokenizer_vocab_size]
    if bad:
        raise TypedLMError(f"logit_bias: token id {bad[0]} is not in the vocabulary "
                           f"(0 ≤ id < {engine.tokenizer_vocab_size})")
    if thinking and engine.reasoning is None:
        raise TypedLMError(f"model '{engine.name}' is not a reasoning model (no <think> markers in its template)")
    row, compile_s = None, 0.0
    if constraint is not None:
        if compiled is None:
            compiled, compile_s = engine.grammars.compile(constraint)
        row = GrammarRow(compiled, vocab_size=engine.model_vocab_size, stop_ids=engine.stop_ids)
    gen = None
    if params.seed is not None and not params.greedy:
        gen = torch.Generator(device=engine.device).manual_seed(params.seed)
    seq = Sequence(prompt_ids=list(prompt_ids), params=params, tokenizer_vocab_size=engine.tokenizer_vocab_size,
                   stop_ids=engine.stop_ids, decode=engine.decode,
                   detok=Detokenizer(engine.tokenizer, params.stop) if params.stop else None,
                   grammar=row, constraint=constraint, generator=gen,
                   reasoning=ReasoningState(engine.reasoning.end_ids, reasoning_budget) if thinking else None,
                   jump=JumpForward(engine) if jump_forward and row is not None else None)
    seq.timings.compile = compile_s
    return seq


def generate(prompt: str | None = None, *, messages: list[dict] | None = None, engine: Engine | None = None,
             json_object: bool = False, json_schema: Any = None, regex: str | None = None,
             choice: list[str] | None = None, grammar: str | None = None, lark: str | None = None,
             structural_tag: Any = None, any_whitespace: bool = True, strict: bool = True,
             lenient: bool = False, max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
             top_k: int = 0, seed: int | None = None, stop: list[str] | str | None = None,
             repetition_penalty: float = 1.0, logit_bias: dict[int, float] | None = None,
             jump_forward: bool = False, logits_processors=(), grammar_engine: str | None = None) -> GenerationResult:
    """Generate text for a raw ``prompt`` or chat ``messages`` under at most one constraint.

    ``logit_bias``: token id -> bias in [-100, 100], added before the grammar mask. ``jump_forward``:
    append the text the grammar forces without sampling (counted in ``forced_tokens``). ``grammar_engine``:
    ``xgrammar`` / ``llguidance`` / ``auto`` for this constraint (default: ``TYPEDLM_GRAMMAR_ENGINE``).

    Raises ``ConstraintError`` (two constraints, bad sampling values), ``GrammarCompileError``
    (constraint does not compile or uses keywords the grammar would not enforce), ``TypedLMError``.
    """
    constraint = make_constraint(json_object=json_object, json_schema=json_schema, regex=regex, choice=choice,
                                 grammar=grammar, lark=lark, structural_tag=structural_tag,
                                 any_whitespace=any_whitespace, strict=strict, lenient=lenient, engine=grammar_engine)
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                            stop=stop or (), repetition_penalty=repetition_penalty, logit_bias=logit_bias or (),
                            logits_processors=tuple(logits_processors or ()))
    engine = engine or default_engine()
    prompt_ids = engine.encode_prompt(prompt=prompt, messages=messages)
    seq = build_sequence(engine, prompt_ids, params, constraint, jump_forward=jump_forward)

    return run_batch(engine, [seq], max_batch=1)[0]
