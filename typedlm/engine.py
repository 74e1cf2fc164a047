"""Engine: the one frozen handle per loaded model. Resolved once; nothing re-inspects the model later.

The engine describes the model (tokenizer, vocab sizes, stop ids, chat profile, device, dtype, context) and
owns, by composition, the :class:`~typedlm.runner.model_runner.ModelRunner` that runs it and an
:class:`EngineCaches` of per-model caches; it imports nothing from ``generate`` or ``decide``.
"""

from __future__ import annotations

import dataclasses
import gc
from dataclasses import dataclass, field
import importlib.util
import platform
import time
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from . import config, models, placement
from .errors import ModelLoadError, TypedLMError
from .grammar.compiler import Grammars
from .lru import LRUCache
from .profile import ChatProfile, ReasoningFormat, detect_reasoning
from .runner.compiled import set_compile_threads
from .runner.model_runner import ModelRunner
from .tokens import SegmentEncoder


@dataclass
class EngineCaches:
    """Per-model caches that features fill as they run (mutable; the engine itself is frozen)."""

    plans: LRUCache = field(default_factory=lambda: LRUCache(256))  # compiled decide plans (decide.plan.get_plan)
    priors: LRUCache = field(default_factory=lambda: LRUCache(256))  # neutral priors (decide.prior)
    fingerprint: str | None = None  # hash of the weights (decide.prior.fingerprint), computed once
    segments: SegmentEncoder | None = None  # rendered prompts' long segments -> ids (typedlm.tokens), made on first use


@dataclass(frozen=True)
class Engine:
    name: str
    model: Any  # transformers PreTrainedModel, eval mode
    tokenizer: Any  # transformers PreTrainedTokenizerFast
    device: torch.device
    dtype: torch.dtype
    chat: ChatProfile
    tokenizer_vocab_size: int  # ids [0, tokenizer_vocab_size) decode to text
    model_vocab_size: int  # lm_head rows; may exceed the tokenizer (padded vocabularies)
    stop_ids: frozenset[int]
    max_context: int
    grammars: Grammars
    runner: ModelRunner  # the one place the model runs (typedlm.runner)
    settings: config.Settings  # what it was loaded with (typedlm.config), handed to the runner and grammars
    kv_bytes_per_token: int = 0  # K+V bytes one token adds to the cache, all layers, at ``dtype``
    attn_heads: int = 1  # query heads (attention-score memory per token pair)
    reasoning: ReasoningFormat | None = None  # <think> markers of a reasoning model
    load_seconds: float = 0.0
    source: str = ""
    caches: EngineCaches = field(default_factory=EngineCaches, compare=False, repr=False)

    # -- prompts ---------------------------------------------------------------------------------
    def render_chat(self, messages: list[dict], **template_kwargs) -> str:
        """The chat template's text; ``template_kwargs`` (``tools``, ``enable_thinking``, ...) go to the template."""
        if not self.chat.has_template:
            raise TypedLMError(f"model '{self.name}' has no chat template: pass a raw prompt instead")
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                  **template_kwargs)

    def encode_prompt(self, *, prompt: str | None = None, messages: list[dict] | None = None) -> list[int]:
        """Token ids of a raw prompt (tokenizer adds its specials) or of rendered chat messages."""
        if (prompt is None) == (messages is None):
            raise TypedLMError("give exactly one of 'prompt' or 'messages'")
        if messages is not None:
            return self.encode_text(self.render_chat(messages))
        return self.tokenizer.encode(prompt, add_special_tokens=True)

    def encode_text(self, text: str) -> list[int]:
        """Ids of a rendered chat prompt (no specials added): segments between added tokens, the long ones
        (a repeated system prompt) read from a cache (:mod:`typedlm.tokens`; the same ids as a plain encode)."""
        if self.caches.segments is None:
            self.caches.segments = SegmentEncoder(self.tokenizer)
        return self.caches.segments.encode(text)

    def sync(self) -> None:
        """Wait for queued device work (timings on CUDA); a no-op on the CPU."""
        self.runner.sync()

    def with_runner(self, runner) -> "Engine":
        """This engine with ``runner`` running its forwards (a decision beside streams: the scheduler's
        :class:`~typedlm.generate.scheduled.ScheduledRunner`); everything else, caches included, shared."""
        return dataclasses.replace(self, runner=runner)

    @property
    def backend(self) -> str:
        """``torch`` or ``mlx``: which framework runs the model."""
        return self.runner.backend

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        d = torch.device(device)
    except RuntimeError as e:
        raise ModelLoadError(f"bad device '{device}': {e}") from e
    if d.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device 'cuda' asked for, but no CUDA GPU is available")
    return d


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def pick_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise ModelLoadError(f"bad dtype '{dtype}': use one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


BACKENDS = ("auto", "torch", "mlx")


def grammar_options(settings: config.Settings) -> dict:
    """The grammar compiler's options (``Grammars``' keyword arguments) from ``settings``."""
    out: dict = {"engine": settings.grammar_engine, "enabled": settings.grammar,
                 "timeout_s": settings.compile_timeout, "max_grammar_bytes": settings.max_grammar_bytes,
                 "cache_dir": settings.grammars_dir, "cache_bytes": int(settings.grammar_cache_mb * 2**20)}
    if settings.llg_threads:
        out["threads"] = settings.llg_threads
    return out


def pick_backend(backend: str) -> str:
    """``torch`` or ``mlx`` for ``backend`` (``auto``: MLX on Apple Silicon when mlx-lm is installed, else torch)."""
    if backend not in BACKENDS:
        raise ModelLoadError(f"bad backend {backend!r}: use one of {', '.join(BACKENDS)}")
    has_mlx = importlib.util.find_spec("mlx") is not None and importlib.util.find_spec("mlx_lm") is not None
    if backend == "auto":
        apple = platform.system() == "Darwin" and platform.machine() == "arm64"
        return "mlx" if apple and has_mlx else "torch"
    if backend == "mlx" and not has_mlx:
        raise ModelLoadError("backend 'mlx' needs mlx and mlx-lm: pip install 'typedlm[mlx]'")
    return backend


def load_engine(ref: str = models.DEFAULT_REF, *, device: str = "auto", dtype: str | None = None,
                progress: bool = True, backend: str | None = None, deterministic: bool | None = None,
                settings: config.Settings | None = None) -> Engine:
    """Resolve ``ref`` (see :mod:`typedlm.models`), load model + tokenizer, build the handle on ``backend``
    (see :func:`pick_backend`). ``deterministic``: see :func:`set_deterministic`. ``settings``: the engine's
    (default: the process's, :func:`typedlm.config.settings`); ``backend`` overrides its own. The heap built
    so far is then frozen (:func:`gc.freeze`): the collector's full passes skip it, so they stay short inside
    grammar compiles."""
    engine = _load_engine(ref, device=device, dtype=dtype, progress=progress, backend=backend,
                          deterministic=deterministic, settings=settings)
    gc.collect()
    gc.freeze()
    return engine


def _load_engine(ref: str, *, device: str, dtype: str | None, progress: bool, backend: str | None,
                 deterministic: bool | None, settings: config.Settings | None) -> Engine:
    t0 = time.perf_counter()
    s = (settings or config.settings()).replace(backend=backend)
    resolved = models.resolve(ref)
    chosen = pick_backend(s.backend)
    dev = pick_device(device) if chosen == "torch" else torch.device("cpu")
    dt = pick_dtype(dtype, dev)
    path = models.local_dir(resolved, progress=progress)
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=resolved.kind != "hub")
        if chosen == "mlx":
            if resolved.kind == "hub":
                raise ModelLoadError("the MLX backend loads local directories only (a HF or MLX model directory)")
            mlx = engine_from_mlx(path, tok, name=resolved.name, dtype=pick_dtype(dtype, dev) if dtype else None,
                                  load_seconds=time.perf_counter() - t0, settings=s)
            return set_deterministic(mlx, deterministic)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=resolved.kind != "hub",
                                                     **placement.load_kwargs(path, dev, dt))
    except OSError as e:
        if resolved.kind == "hub":
            raise ModelLoadError(
                f"could not load hub model '{ref}' (is the Hugging Face hub reachable?): {e}. "
                "Offline, pass a local path instead: a HF model directory or a .gguf file"
            ) from e
        raise ModelLoadError(f"could not load model '{ref}' from {path}: {e}") from e
    return set_deterministic(engine_from_model(model, tok, name=resolved.name, device=dev, dtype=dt, source=path,
                                               load_seconds=time.perf_counter() - t0, settings=s), deterministic)


def set_deterministic(engine: Engine, on: bool | None) -> Engine:
    """Deterministic mode on (True: batch-invariant scoring and generation) or off (False: neither) for
    ``engine``; None leaves the runner's default (invariant scoring, fast generation). Asking for it where it
    cannot be had (the MLX runner, a model the hooks cannot take) is an error."""
    if on is None:
        return engine
    runner = engine.runner
    if not runner.capabilities.deterministic:
        if on:
            raise ModelLoadError(f"deterministic (batch-invariant) scoring is not available on the {runner.backend} "
                                 f"backend for {engine.name}: {runner.invariant_reason}")
        return engine
    if runner.set_deterministic(on) != on:
        raise ModelLoadError(f"deterministic (batch-invariant) scoring is not available for {engine.name}: "
                             f"{runner.invariant_reason}")
    return engine


def engine_from_model(model, tokenizer, *, name: str, device: torch.device | str = "cpu",
                      dtype: torch.dtype = torch.float32, source: str = "",
                      load_seconds: float = 0.0, settings: config.Settings | None = None) -> Engine:
    """Build the handle from an already-constructed model + tokenizer (used by tests and benches);
    ``settings`` default: the process's."""
    device = torch.device(device)
    settings = settings or config.settings()
    config.export_compile_settings(settings)  # before any torch.compile: the kernel cache kept across restarts
    set_compile_threads(settings.compile_threads)
    if device.type == "cuda":
        # cuDNN attention builds an execution plan per new shape; in decode every step has a new KV
        # length, so each first-seen length cost ~40 ms on the H200 (57 ms vs 15 ms per forward for
        # qwen2.5-0.5b until every length had been seen once). Flash / mem-efficient SDPA need no plan.
        torch.backends.cuda.enable_cudnn_sdp(False)
    model = placement.place(model, device, dtype).eval()  # quantized / multi-device models are not moved
    model_vocab = int(model.get_output_embeddings().weight.shape[0])
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    max_ctx = int(getattr(model.config, "max_position_embeddings", 0) or 2048)
    runner = ModelRunner(model, device=device, dtype=dtype, max_context=max_ctx, settings=settings,
                         placed=placement.is_placed(model))
    return _assemble(model, tokenizer, runner, model.config, gen_eos, model_vocab=model_vocab, name=name,
                     source=source, load_seconds=load_seconds, settings=settings)


def engine_from_mlx(path: str, tokenizer, *, name: str, dtype: torch.dtype | None = None,
                    load_seconds: float = 0.0, settings: config.Settings | None = None) -> Engine:
    """The handle on the MLX backend: mlx-lm loads ``path`` (a HF or MLX directory, quantized or not);
    the config, tokenizer and generation config are read as for torch."""
    t0 = time.perf_counter()
    cfg = AutoConfig.from_pretrained(path)
    try:
        gen_eos = GenerationConfig.from_pretrained(path).eos_token_id
    except OSError:  # no generation_config.json
        gen_eos = None
    from .runner.mlx_runner import MLXRunner, load_model  # optional extra: mlx (the module imports mlx)

    model, dt = load_model(path, dtype)
    vocab = int(cfg.get_text_config(decoder=True).vocab_size)
    max_ctx = int(getattr(cfg, "max_position_embeddings", 0) or 2048)
    runner = MLXRunner(model, dtype=dt, max_context=max_ctx, vocab=vocab)
    return _assemble(model, tokenizer, runner, cfg, gen_eos, model_vocab=vocab, name=name, source=path,
                     load_seconds=load_seconds + time.perf_counter() - t0, settings=settings or config.settings())


def _assemble(model, tokenizer, runner, cfg, gen_eos, *, model_vocab: int, name: str, source: str,
              load_seconds: float, settings: config.Settings) -> Engine:
    """What both backends derive the same way: stop ids, chat profile, KV sizes, grammars."""
    device, dtype, max_ctx = runner.device, runner.dtype, runner.max_context
    tok_vocab = len(tokenizer)
    stops: set[int] = set()
    if tokenizer.eos_token_id is not None:
        stops.add(int(tokenizer.eos_token_id))
    if isinstance(gen_eos, int):
        stops.add(gen_eos)
    elif gen_eos:
        stops.update(int(i) for i in gen_eos)
    if not stops:
        raise ModelLoadError(f"model '{name}' declares no end-of-sequence token")
    chat = ChatProfile(template=getattr(tokenizer, "chat_template", None))
    text_cfg = cfg.get_text_config(decoder=True)
    heads = int(text_cfg.num_attention_heads)
    head_dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // heads
    kv_heads = getattr(text_cfg, "num_key_value_heads", None) or heads
    kv_bytes = 2 * text_cfg.num_hidden_layers * kv_heads * head_dim * torch.finfo(dtype).bits // 8
    grammars = Grammars.for_tokenizer(tokenizer, model_vocab_size=model_vocab, stop_ids=sorted(stops),
                                      **grammar_options(settings))
    reasoning = detect_reasoning(tokenizer, chat.template)
    return Engine(name=name, model=model, tokenizer=tokenizer, device=device, dtype=dtype, chat=chat,
                  tokenizer_vocab_size=tok_vocab, model_vocab_size=model_vocab,
                  stop_ids=frozenset(stops), max_context=max_ctx, grammars=grammars,
                  runner=runner, settings=settings, kv_bytes_per_token=int(kv_bytes),
                  attn_heads=heads, reasoning=reasoning, load_seconds=load_seconds, source=source)
