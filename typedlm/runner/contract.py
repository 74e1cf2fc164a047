"""The decode KV contract: what a scheduler may ask of the cache its rows decode from.

A backend (the torch runner's :class:`~typedlm.runner.static_kv.StaticKV` and
:class:`~typedlm.runner.dynamic_kv.DynamicKV`; a second backend's own) implements :class:`KVCache`.

* **Rows are slots.** ``acquire()`` gives a row a slot in ``[0, capacity)`` for its life; every call
  names rows by slot (``slots[i]`` is the row of ``tokens[i]``); ``release(slot)`` frees it. Nothing
  else evicts: no call reorders or drops rows behind the caller's back.
* **Shapes and dtypes.** Ids are host lists of ints (``prefill``: a ``[g, T]`` long tensor of rows of
  one length). Logits come back as float32 on the model's device: ``[n, V]`` after each row's last
  token, or ``[n, k, V]`` after every fed position when ``every``; ``V`` is the lm_head's row count
  (padded vocabularies included). The returned tensor is the caller's: a later call never writes it.
* **Lengths.** A slot holds ``length`` tokens; ``prefill`` starts it at 0, ``step``/``extend`` append,
  ``truncate`` forgets the last ``n`` (rejected drafts). ``max_len`` bounds prompt + output.
* **Ownership and threads.** The cache belongs to the runner of one engine; a scheduler drives it from
  its engine thread. ``acquire``/``release`` may come from any thread; forwards of two schedulers
  that share one cache (the static cache is shared per engine) are serialized by the cache.
* **Prefix cache** (the runner's :mod:`~typedlm.runner.prefix_cache`): ``prefill`` may start rows from a
  cached prefix's KV (``past``, copied into each slot; ``ids`` are then the tokens after it); ``read`` copies
  a slot's KV out for the cache to keep; ``cached_tokens(slot)`` says how many prompt tokens came from it.
* ``device_feed`` (optional, default False): ``step`` also takes the ids as a device tensor ``[n]`` (the
  sampler's output, before the host has read it); the static slots do, so a scheduler queues the next forward
  without waiting for the host.
* ``partial_steps``: whether a step may cover a subset of the held slots (static slots: yes; the
  dynamic left-padded cache: no, every held slot steps together).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class KVCache(Protocol):
    capacity: int  # slots
    max_len: int  # tokens a slot can hold (prompt + output)
    partial_steps: bool

    @property
    def free_slots(self) -> int: ...

    @property
    def size(self) -> int:
        """Slots held by rows."""

    def acquire(self) -> int: ...

    def release(self, slot: int) -> None: ...

    def prefill(self, ids: torch.Tensor, slots: list[int], past: torch.Tensor | None = None) -> torch.Tensor:
        """Rows of one length into fresh slots (after ``past``, a cached prefix's KV ``[layers, 2, kv_heads,
        m, head_dim]``, when given) -> logits ``[g, V]`` of their last position."""

    def read(self, slot: int, a: int, b: int) -> torch.Tensor:
        """A copy of the KV of tokens ``[a, b)`` of ``slot``: ``[layers, 2, kv_heads, b - a, head_dim]``."""

    def cached_tokens(self, slot: int) -> int:
        """Prompt tokens of ``slot`` that its prefill read from the prefix cache."""

    def step(self, tokens: list[int], slots: list[int]) -> torch.Tensor:
        """One new token per row -> logits ``[n, V]`` (the CUDA-graph path where there is one)."""

    def extend(self, tokens: list[list[int]], slots: list[int], every: bool = False) -> torch.Tensor:
        """Several new tokens per row (forced tokens, drafts) -> logits ``[n, V]`` after each row's last
        token, or ``[n, k, V]`` after every fed position (``every``)."""

    def truncate(self, drop: list[int], slots: list[int]) -> None:
        """Forget the last ``drop[i]`` tokens of ``slots[i]``."""

    def capture(self, max_tokens: int | None = None) -> float:
        """Record what replays later (CUDA graphs) up to ``max_tokens`` per row; seconds spent."""
