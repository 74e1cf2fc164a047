"""Static KV slots for Llama / Qwen2 / Qwen3: the slot bookkeeping and the buffer; no forward runs here
(:mod:`~typedlm.runner.static_forwards` runs the model on it).

* one preallocated buffer ``[2 (K, V), layers, capacity, kv_heads, max_len + 1, head_dim]``; a row
  owns one **slot** for its life: prefill writes ``[slot, :, :T]``, each decode step writes column
  ``length`` of its slot, ``release`` marks the slot free (nothing moves). Column ``max_len`` is scratch:
  rows of the decode range not in a call write there and nothing reads it.
* slots go lowest first (:class:`~typedlm.runner.slots.SlotPool`), so a decode range ``[0, B)`` stays compact.
"""

from __future__ import annotations

import threading

import torch

from ..errors import TypedLMError
from .slots import SlotCache, SlotPool

FAMILIES = ("llama", "qwen2", "qwen3")


def unsupported(model, placed: bool) -> str | None:
    """None when :class:`StaticKV` can run this model, else the reason it cannot."""
    cfg = model.config
    if placed:
        return "quantized or spread over several devices (StaticKV fuses plain weights on one device)"
    if cfg.model_type not in FAMILIES:
        return f"model type {cfg.model_type!r} is not one of {FAMILIES}"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r}"
    if getattr(cfg, "use_sliding_window", False) or "sliding_attention" in (getattr(cfg, "layer_types", None) or ()):
        return "sliding-window attention"
    rope = (getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {})
    if rope.get("rope_type", rope.get("type", "default")) not in ("default", "linear", "llama3"):
        return f"rope type {rope.get('rope_type')!r}"
    return None


class StaticKV(SlotCache):
    partial_steps = True
    device_feed = True  # its forwards take a step's ids as a device tensor too

    def __init__(self, *, layers: int, kv_heads: int, head_dim: int, device: torch.device, dtype: torch.dtype,
                 capacity: int, max_len: int, invariant: bool = False):
        """``invariant``: the slots of deterministic generation (its forwards run on the batch-invariant ops)."""
        self.capacity, self.max_len, self.dev, self.invariant = capacity, max_len, device, invariant
        self.kv_heads, self.head_dim = kv_heads, head_dim
        # one buffer ``[2, layers, capacity, kv_heads, max_len + 1, head_dim]``; ``k[i]`` / ``v[i]`` are its layers
        # (a cached prefix goes into a slot, and a slot's blocks out of it, in one copy instead of one a layer)
        self.store = torch.zeros(2, layers, capacity, kv_heads, max_len + 1, head_dim, dtype=dtype, device=device)
        self.k, self.v = list(self.store[0]), list(self.store[1])
        self.length = [0] * capacity  # tokens in each slot's KV
        self.slots = SlotPool(capacity)
        self.lock = threading.RLock()  # schedulers sharing this cache take turns per forward

    # -- slots (any thread) -----------------------------------------------------------------------
    def acquire(self) -> int:
        slot = self.slots.acquire()
        self.length[slot] = 0
        return slot

    def release(self, slot: int) -> None:
        self.slots.release(slot)

    def read(self, slot: int, a: int, b: int) -> torch.Tensor:
        """KV of tokens ``[a, b)`` of ``slot`` -> ``[layers, 2, kv_heads, b - a, head_dim]`` (a copy)."""
        return self.store[:, :, slot, :, a:b].transpose(0, 1).contiguous()  # one copy of every layer's K and V

    def put(self, slot: int, past: torch.Tensor) -> None:
        """Copy a cached prefix's KV ``[layers, 2, kv_heads, m, head_dim]`` into ``slot``; its length is then ``m``."""
        m = int(past.shape[3])
        self.store[:, :, slot, :, :m].copy_(past.transpose(0, 1))  # one slice copy: no index tensor staged
        self.length[slot] = m

    def truncate(self, drop: list[int], slots: list[int]) -> None:
        """Only the length moves back; the stale columns are past every later mask and get overwritten."""
        with self.lock:
            for s, n in zip(slots, drop):
                self.length[s] -= n

    def check(self, longest: int) -> int:
        """``longest`` (tokens a row will hold), or TypedLMError when it passes ``max_len``."""
        if longest > self.max_len:
            raise TypedLMError(f"a row reached the static KV length ({self.max_len}; TYPEDLM_KV_LEN)")
        return longest
