"""The runner contract: what the rest of the package may ask of a backend (torch :class:`ModelRunner`, MLX
:class:`MLXRunner`), checked for every implementation by ``tests/runner/test_conformance.py``.

Statements (each one is a test there):

1. **Capabilities are declared.** ``runner.capabilities`` is a frozen :class:`Capabilities`; callers read its
   fields and never probe a runner or a cache with ``hasattr`` / ``getattr``.
2. **Books apart from forwards.** ``decode_cache(n)`` gives a :class:`SlotBook` that keeps books only (slots,
   lengths, the KV memory); ``runner.forwards(book)`` is what runs the model on it (:class:`Forwards`). The
   static slots' forwards are their own object (:class:`~typedlm.runner.static_forwards.StaticForwards`); the
   dynamic and MLX caches are laid out by the framework cache they feed, so they are their own forwards,
   through the runner's model call.
3. **Rows are slots.** ``acquire()`` gives a row a slot in ``[0, capacity)`` for its life; every call names rows
   by slot; ``release(slot)`` frees it; nothing else evicts. ``size`` + ``free_slots`` = ``capacity``.
4. **Shapes.** ``runner.prefill(book, prompts, slots)`` -> logits ``[g, V]`` after each prompt's last token;
   ``runner.run(book, feeds, slots)`` -> ``[n, V]`` after each row's last fed token, or ``[n, k, V]`` at every
   fed position with ``every``; ``V`` is the lm_head's row count; logits are float32 (torch) or the model's
   dtype (MLX arrays, read by the MLX sampler) and belong to the caller.
5. **Lengths.** A row's prefill then its steps give the logits a single-row run gives (greedy: the same
   token); ``truncate`` forgets a row's last ``n`` tokens, and feeding them again gives the same logits.
6. **Scoring.** ``prefill_prefix(ids)`` -> a prefix cache; ``score(ids, prefix, positions, allow, read)`` ->
   (logits ``[len(read), V]``, the prefix cut back to its length): scoring the same pass twice gives the same
   logits; ``cached_prefix(ids)`` -> tokens the prefix cache would supply (0 without one).
   ``prompt_prefill(ids)`` -> a :class:`Job` giving what ``prefill_prefix(ids)`` gives, a chunk at a time
   where the runner can cut it (``chunked``: each chunk continues one KV cache), else whole.
7. **Deterministic mode.** ``set_deterministic(on)`` returns whether it is on; a runner whose capabilities
   say ``deterministic=False`` returns False and stays off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch


@dataclass(frozen=True)
class Capabilities:
    """What a runner can do, declared (read, never probed)."""

    backend: str  # "torch" | "mlx"
    cuda_graphs: bool  # decode steps replay CUDA graphs
    invariant: bool  # scoring passes are batch-invariant now (a row's logits: the same bits whatever shares its pass)
    deterministic: bool  # deterministic (batch-invariant) generation can be switched on
    prefix_cache: bool  # prompt KV is reused across requests (``runner.prefix_cache`` is not None)
    device_feed: bool  # the default decode book's ``step_ids`` take ids on the device (no host sync between steps)


@runtime_checkable
class SlotBook(Protocol):
    """The books of a decode KV: slots and lengths (no forward runs here)."""

    capacity: int  # slots
    max_len: int  # tokens a slot can hold (prompt + output)
    partial_steps: bool  # a step may cover a subset of the held slots
    device_feed: bool  # its forwards take a step's ids as a device tensor

    @property
    def free_slots(self) -> int: ...

    @property
    def size(self) -> int:
        """Slots held by rows."""

    def acquire(self) -> int: ...

    def release(self, slot: int) -> None: ...

    def truncate(self, drop: list[int], slots: list[int]) -> None:
        """Forget the last ``drop[i]`` tokens of ``slots[i]``."""

    def read(self, slot: int, a: int, b: int) -> torch.Tensor:
        """A copy of the KV of tokens ``[a, b)`` of ``slot``: ``[layers, 2, kv_heads, b - a, head_dim]``."""

    def cached_tokens(self, slot: int) -> int:
        """Prompt tokens of ``slot`` that its prefill read from the prefix cache."""


@runtime_checkable
class Forwards(Protocol):
    """The model run on one :class:`SlotBook`."""

    def prefill(self, ids, slots: list[int], past: torch.Tensor | None = None) -> Any:
        """Rows of one length into fresh slots (after ``past``, a cached prefix's KV) -> last logits ``[g, V]``."""

    def step(self, tokens, slots: list[int]) -> Any:
        """One new token per row -> logits ``[n, V]``."""

    def extend(self, tokens: list[list[int]], slots: list[int], every: bool = False) -> Any:
        """Several new tokens per row -> ``[n, V]`` after each row's last, or ``[n, k, V]`` (``every``)."""

    def capture(self, max_tokens: int | None = None) -> float:
        """Record what replays later (CUDA graphs) up to ``max_tokens`` per row; seconds spent."""


@runtime_checkable
class Job(Protocol):
    """Model work a scheduler runs in pieces: ``advance(n)`` computes about ``n`` more of its ``left`` tokens (all of
    them unless ``chunked``) and returns True when done, with ``result`` set."""

    chunked: bool
    result: Any

    @property
    def left(self) -> int: ...

    def advance(self, n: int) -> bool: ...


class Whole:
    """A :class:`Job` that cannot be cut: ``fn(*args, **kwargs)`` at its first ``advance``, costing ``tokens``."""

    chunked = False

    def __init__(self, tokens: int, fn, *args, **kwargs):
        self.left, self.result = max(1, int(tokens)), None
        self._call = (fn, args, kwargs)

    def advance(self, n: int) -> bool:
        fn, args, kwargs = self._call
        self.result, self.left = fn(*args, **kwargs), 0
        return True


@runtime_checkable
class Runner(Protocol):
    """The one place a model runs (statements in the module docstring)."""

    backend: str
    device: torch.device
    dtype: torch.dtype
    max_context: int
    prefix_cache: Any  # the runner's PrefixCache, or None (capabilities.prefix_cache)
    invariant_reason: str | None  # None: scoring is batch-invariant; else why not

    @property
    def capabilities(self) -> Capabilities: ...

    def forward(self, input_ids, cache=None, **kwargs) -> tuple: ...

    def decode_cache(self, max_batch: int, *, dynamic: bool = False) -> SlotBook: ...

    def forwards(self, kv: SlotBook) -> Forwards: ...

    def prefill(self, kv: SlotBook, prompts: list[list[int]], slots: list[int]) -> Any: ...

    def run(self, kv: SlotBook, feeds: list[list[int]], slots: list[int], every: bool = False) -> Any: ...

    def step_ids(self, kv: SlotBook, ids, slots: list[int]) -> Any: ...

    def capture(self, kv: SlotBook, max_tokens: int | None = None) -> float: ...

    def graph_stats(self, kv: SlotBook) -> tuple[int, float]:
        """(CUDA graphs captured for ``kv``, seconds spent capturing them)."""

    def set_deterministic(self, on: bool) -> bool: ...

    def prefill_prefix(self, ids: list[int]) -> Any: ...

    def prefill_prefixes(self, ids_list: list[list[int]]) -> list: ...

    def prompt_prefill(self, ids: list[int]) -> Job: ...

    def cached_prefix(self, ids: list[int]) -> int: ...

    def score(self, ids: list[int], prefix, positions: list[int], allow: torch.Tensor, read: list[int],
              keep: int | None = None) -> tuple: ...

    def score_expand(self, rows: torch.Tensor, prefix, read: list[int]) -> torch.Tensor: ...

    def weight_samples(self, n: int): ...

    def sync(self) -> None: ...
