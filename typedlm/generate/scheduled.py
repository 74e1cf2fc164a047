"""A decision's runner beside streams: :class:`ScheduledRunner` implements the Runner protocol's scoring methods
(the ones the decide code calls) by submitting each forward to the scheduler as a :class:`~.work.Work` item and
waiting for it, so a decision's forwards run inside engine steps, after the decode forward, within the step's
token budget (:mod:`.work`). :func:`scheduled_engine` gives the Engine handle carrying it.

What becomes chunkable: a prompt prefill (``prefill_prefix``, and each prompt of ``prefill_prefixes`` while
decode rows run) is the runner's :meth:`prompt_prefill` job, cut by the scheduler into chunks continuing one KV
cache. A pass that starts with an uncached prompt (``score(..., keep=)`` with no prefix: the ``fused`` packing)
gets its prompt prefilled that way first while decode rows run, then the pass itself whole (the prompt then read
from the prefix cache; with the cache off, the rest of the pass on the prefilled prompt). Every other pass goes
whole. What a decision computes is the same either way, bit for bit with batch-invariant scoring
(``tests/generate/test_decide_beside_streams.py``); with nothing decoding every job goes whole (exactly what
the runner computes alone). Book-keeping and lookups (``capabilities``, ``cached_prefix``, weights) are the base
runner's, read on the calling thread; decode forwards (``prefill``/``run``/``step_ids``/``capture``) are not a
decision's and are refused.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from ..engine import Engine
from ..errors import TypedLMError
from ..runner.contract import Capabilities, Job, Runner, Whole
from ..runner.invariant import mode as invariant
from ..runner.model_runner import truncate
from ..runner.prefix_cache import to_hf
from ..runner.score_graph import Ride
from .work import Work


def scheduled_engine(engine: Engine, scheduler) -> Engine:
    """The Engine handle a decision beside ``scheduler``'s streams runs with (its runner: a ScheduledRunner)."""
    return engine.with_runner(ScheduledRunner(engine.runner, scheduler))


class ScheduledRunner:
    """``base``'s scoring forwards as work of ``scheduler`` (module docstring); ``cancel()`` drops what is queued
    and makes every later forward raise."""

    def __init__(self, base: Runner, scheduler):
        self.base, self.scheduler, self.cancelled = base, scheduler, False
        self.backend, self.device, self.dtype, self.max_context = base.backend, base.device, base.dtype, base.max_context
        self.keeps_logits = base.keeps_logits

    def cancel(self) -> None:
        """Queued work leaves before the next step (its waits raise), later forwards raise at once."""
        self.cancelled = True

    # -- declared facts: the base runner's ------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return self.base.capabilities

    @property
    def prefix_cache(self):
        return self.base.prefix_cache

    @property
    def invariant_reason(self) -> str | None:
        return self.base.invariant_reason

    def cached_prefix(self, ids: list[int]) -> int:
        return self.base.cached_prefix(ids)

    def weight_samples(self, n: int):
        return self.base.weight_samples(n)

    def sync(self) -> None:
        self.base.sync()

    def set_deterministic(self, on: bool) -> bool:
        return self.base.set_deterministic(on)

    # -- a decision's forwards: work of the scheduler ---------------------------------------------------
    def _submit(self, jobs: list[Job]) -> list:
        if self.cancelled:
            raise TypedLMError("decision cancelled")
        works = [self.scheduler.submit_work(Work(job, self)) for job in jobs]
        return [w.future.result() for w in works]

    def _busy(self) -> bool:
        """Are decode rows running or waiting? (then prompt prefills and large passes go in chunks)"""
        return bool(self.scheduler.batch_size or self.scheduler.queue_depth)

    def _whole(self, tokens: int, fn, *args, **kwargs):
        """``fn`` as one work item (with this thread's batch-invariance setting)."""
        return self._submit([Whole(tokens, invariant.bound(fn), *args, **kwargs)])[0]

    def forward(self, input_ids, cache=None, **kwargs) -> tuple:
        return self._whole(int(input_ids.numel()), self.base.forward, input_ids, cache, **kwargs)

    def prompt_prefill(self, ids: list[int]) -> Job:
        return self.base.prompt_prefill(ids)

    def prefill_prefix(self, ids: list[int]):
        return self._submit([self.base.prompt_prefill(ids)])[0]

    def prefill_prefixes(self, ids_list: list[list[int]]) -> list:
        """While decode rows run: each prompt its own chunked prefill; else the base's batched prefill whole."""
        if self._busy():
            return self._submit([self.base.prompt_prefill(ids) for ids in ids_list])
        return self._whole(sum(map(len, ids_list)), self.base.prefill_prefixes, ids_list)

    def score(self, ids: list[int], prefix, positions: list[int], allow: torch.Tensor, read: list[int],
              keep: int | None = None) -> tuple:
        """One scoring pass whole, or, while decode rows run and its uncomputed tokens exceed a step's budget, in
        chunks: the prompt (``keep`` tokens, no prefix given) prefilled first, then the pass's queries on it
        (:class:`ChunkedPass`, when each query sees only keys before it)."""
        fresh = len(ids) - (self.base.cached_prefix(ids[:keep]) if prefix is None and keep else 0)
        if not (self._busy() and fresh > self.scheduler.work.step_tokens and ChunkedPass.fits(
                self.base, ids, prefix, allow, read, keep)):
            return self._whole(len(ids), self.base.score, ids, prefix, positions, allow, read, keep)
        if prefix is None:
            prefix, q = self.prefill_prefix(ids[:keep]), len(ids) - keep
            ids, positions, allow, read = ids[keep:], positions[keep:], allow[-q:], [r - keep for r in read]
        return self._submit([ChunkedPass(self.base, ids, prefix, positions, allow, read)])[0]

    def score_expand(self, rows: torch.Tensor, prefix, read: list[int]) -> torch.Tensor:
        return self._whole(int(rows.numel()), self.base.score_expand, rows, prefix, read)

    # -- decode: the scheduler's own, never a decision's -----------------------------------------------
    def decode_cache(self, max_batch: int, *, dynamic: bool = False):
        return self.base.decode_cache(max_batch, dynamic=dynamic)

    def forwards(self, kv):
        return self.base.forwards(kv)

    def graph_stats(self, kv) -> tuple[int, float]:
        return self.base.graph_stats(kv)

    def _decode(self, *_args, **_kwargs):
        raise TypedLMError("a scheduled runner runs a decision's forwards; decode rows run in the scheduler")

    prefill = run = step_ids = capture = _decode


class ChunkedPass:
    """A scoring pass on a prefix cache as a chunked :class:`~typedlm.runner.contract.Job`: its queries ``n`` at a
    time, each chunk's KV kept on the cache for the next (its attention rows cut to the keys so far: a query sees
    no later key), the cache cut back to the prefix after the last chunk or a failed one. Result: what
    ``runner.score`` gives for the whole pass (the logits at ``read``, the cache)."""

    chunked = True

    def __init__(self, runner: Runner, ids, prefix, positions, allow, read):
        self.runner, self.ids, self.prefix, self.positions, self.allow, self.read = \
            runner, ids, prefix, positions, allow, read
        self.start, self.at, self.parts, self.result = allow.shape[1] - len(ids), 0, [], None

    @staticmethod
    def fits(runner: Runner, ids, prefix, allow, read, keep) -> bool:
        """Can this pass go in chunks? A torch cache, sorted reads after the prompt, no query seeing a later key."""
        if runner.capabilities.backend != "torch" or list(read) != sorted(read) or (prefix is None and not keep):
            return False
        lead = keep if prefix is None else 0  # the prompt's tokens, prefilled first
        if min(read, default=lead) < lead:
            return False
        q = len(ids) - lead
        own = allow[-q:, allow.shape[1] - q:] if q else allow[:0, :0]
        return not bool(torch.triu(own, diagonal=1).any())

    @property
    def left(self) -> int:
        return len(self.ids) - self.at

    def _chunk(self, n: int) -> Ride:
        """The next ``n`` queries' pass on the prefix so far (a chunk with no read still asks for one logits row:
        the lm_head takes no empty input; not kept)."""
        a, b = self.at, min(len(self.ids), self.at + max(1, n))
        read = [r - a for r in self.read if a <= r < b]
        self._reads = len(read)
        return Ride(self.prefix, self.ids[a:b], self.positions[a:b], self.allow[a:b, :self.start + b],
                    read or [b - a - 1], self.start if b == len(self.ids) else self.start + b)

    def advance(self, n: int) -> bool:
        c = self._chunk(n)
        try:
            c.out = self.runner.score(c.ids, c.past, c.positions, c.allow, c.read, keep=c.keep)
        except BaseException:
            truncate(self.prefix, self.start)
            raise
        return self.rode(c)

    def ride(self, n: int) -> Ride | None:
        """The next chunk for a decode step's forward (``mixed_step``), or None where no score graph takes it."""
        c = self._chunk(n)
        return c if self.runner._graphed(self.start + self.at, len(c.ids)) else None

    def rode(self, c: Ride) -> bool:
        """A chunk's outputs applied -> whether the pass is done: its logits kept, the prefix grown (eager: the same
        cache; a score graph's: a new one, the buffer's next prefix)."""
        logits, prefix = c.out
        self.prefix = prefix if isinstance(prefix, DynamicCache) else to_hf(prefix, copy=False)
        self.parts.append(logits[:self._reads])
        self.at += len(c.ids)
        last = self.at == len(self.ids)
        if last:
            self.result = (torch.cat(self.parts), self.prefix)
        return last
