"""Turning batch invariance on for a model, per thread.

:func:`install` puts hooks on a loaded transformers model (Llama / Qwen2 / Qwen3 / any family whose
attention goes through transformers' ``AttentionInterface`` and whose norms are ``*RMSNorm`` modules):
every ``nn.Linear``, every RMSNorm and the attention function then take the invariant ops of
:mod:`.ops` / :mod:`.attention` while :func:`active` is true on the calling thread, and their own code
otherwise. So a decision scoring on one thread is batch-invariant while a generation stream on another
keeps its fast kernels. Nothing is copied; the hooks read the modules' own weights.
"""

from __future__ import annotations

import contextlib
import threading
import types

from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from . import attention as inv_attention, ops, triton_attention, triton_ops

NAME = "typedlm_invariant"
_per_thread = threading.local()


def active() -> bool:
    return getattr(_per_thread, "on", False)


@contextlib.contextmanager
def enabled(on: bool = True):
    """Batch-invariant ops on this thread inside the block (``on=False``: leave the thread as it is)."""
    before = active()
    _per_thread.on = before or on
    try:
        yield
    finally:
        _per_thread.on = before


def bound(fn):
    """``fn`` carrying this thread's setting to whichever thread calls it (forwards queued to the engine
    thread as a decision's work, :mod:`typedlm.generate.scheduled`)."""
    on = active()

    def call(*args, **kwargs):
        with enabled(on):
            return fn(*args, **kwargs)

    return call


def linear(x, weight, bias=None):
    """The invariant ``F.linear`` for ``x``'s device: the Triton GEMM on CUDA, fixed row tiles elsewhere."""
    return (triton_ops if triton_ops.available(x) else ops).linear(x, weight, bias)


def rms_norm(x, weight, eps: float):
    return (triton_ops if triton_ops.available(x) else ops).rms_norm(x, weight, eps)


def attention(query, key, value, mask, scale: float):
    """Invariant attention (contract of :func:`.attention.attention`): the Triton kernel where it runs."""
    fn = triton_attention.attention if triton_attention.available(query) else inv_attention.attention
    return fn(query, key, value, mask, scale)


def _linear_forward(self, x):
    if active():
        return linear(x, self.weight, self.bias)
    return nn.Linear.forward(self, x)


def _rms_forward(self, x):
    if active():
        return rms_norm(x, self.weight, self.variance_epsilon)
    return type(self).forward(self, x)


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    if active():
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return attention(query, key, value, attention_mask, scale), None

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  **kwargs)


def _register() -> None:
    AttentionInterface.register(NAME, _attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def unsupported(model) -> str | None:
    """Why :func:`install` cannot make ``model`` batch-invariant, or None."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "_attn_implementation", None) not in ("sdpa", "eager", NAME):
        return f"attention implementation {getattr(cfg, '_attn_implementation', None)!r} (needs sdpa or eager)"
    if not any(type(m).__name__.endswith("RMSNorm") and hasattr(m, "variance_epsilon") for m in model.modules()):
        return "no RMSNorm modules with variance_epsilon"
    return None


def install(model) -> str | None:
    """Hook ``model`` (idempotent). Returns None, or why it cannot be done (then nothing is changed)."""
    reason = unsupported(model)
    if reason is not None:
        return reason
    _register()
    for m in model.modules():
        if isinstance(m, nn.Linear) and type(m) is nn.Linear:
            m.forward = types.MethodType(_linear_forward, m)
        elif type(m).__name__.endswith("RMSNorm") and hasattr(m, "variance_epsilon"):
            m.forward = types.MethodType(_rms_forward, m)
    model.config._attn_implementation = NAME
    return None



