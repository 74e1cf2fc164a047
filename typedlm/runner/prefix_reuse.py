"""How the torch runner's prefills go through its :class:`~typedlm.runner.prefix_cache.PrefixCache`.

* **Generation** (:func:`prefill_rows`): each prompt's longest cached prefix (whole blocks, at least one
  token left to compute: the row needs the logits of its last token) is copied into the row's slot and only
  the rest is prefilled (rows with the same cached prefix together); then the row's new whole blocks are
  stored, read back from its slot. The slot remembers how many tokens came from the cache
  (``kv.cached_tokens(slot)``: ``usage.prompt_tokens_details.cached_tokens``).
* **Decisions** (:class:`PromptPrefill`, :func:`cached_pass` + :func:`store_pass`): the prompt prefix is
  looked up the same way and the KV a decision computes for it is stored. A decision prompt puts the plan's
  instructions and questions before the context, so after the first call on a schema every call reads
  that part from the cache and computes only its context.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from .allow import rows_from
from .prefix_cache import MISS, Match, PrefixCache, from_hf, to_hf
from .score_graph import Ride
from .tensors import device_tensor, to_device


class WeightsStamp:
    """``stamp()`` changes when any weight of ``model`` is replaced or written in place (storage pointer, version
    counter). The modules are walked for their parameters once, and again only after a parameter is registered on
    any module (a replaced ``nn.Parameter``): a lookup reads two integers a parameter (walking the modules each time
    was 1.0 of 1.2 ms a lookup for Qwen2.5-0.5B's 290 parameters on this CPU)."""

    epoch = 0  # parameters registered anywhere so far (a global module hook counts them)
    _hooked = False

    def __init__(self, model):
        self.model, self._params, self._seen = model, [], -1
        if not WeightsStamp._hooked:
            torch.nn.modules.module.register_module_parameter_registration_hook(WeightsStamp._registered)
            WeightsStamp._hooked = True

    @staticmethod
    def _registered(module, name, param):
        WeightsStamp.epoch += 1

    def __call__(self) -> int:
        if self._seen != WeightsStamp.epoch:
            self._seen, self._params = WeightsStamp.epoch, list(self.model.parameters())
        return hash(tuple((p.data_ptr(), p._version) for p in self._params))


def prefill_rows(cache: PrefixCache, kv, fw, prompts: list[list[int]], slots: list[int], device) -> torch.Tensor:
    """Prompts of one length into fresh slots of ``kv`` (run by its forwards ``fw``), each on its cached prefix
    -> float32 logits ``[g, V]``."""
    hits = [cache.match(p, limit=len(p) - 1) for p in prompts]
    groups: dict[int, list[int]] = {}
    for i, h in enumerate(hits):
        groups.setdefault(id(h.block), []).append(i)  # the same last block: the same cached prefix
    out: list = [None] * len(prompts)
    for rows in groups.values():
        h = hits[rows[0]]
        ids = device_tensor([prompts[i][h.length:] for i in rows], device)
        logits = fw.prefill(ids, [slots[i] for i in rows], past=h.kv())
        for j, i in enumerate(rows):
            out[i] = logits[j]
    for p, s, h in zip(prompts, slots, hits):
        kv.note_cached(s, h.length)
        cache.insert(p, lambda a, b, s=s: kv.read(s, a, b), after=h)
    return torch.stack(out)


class PromptPrefill:
    """A decision prompt's KV (a transformers cache) as a :class:`~typedlm.runner.contract.Job`: its cached prefix
    (looked up at the first ``advance``), the rest computed ``n`` tokens a forward, each chunk continuing the one
    cache (positions follow it; only the KV is kept), then stored. One ``advance`` of every ``left`` token is one
    forward of the uncached rest."""

    chunked = True

    def __init__(self, runner, ids: list[int]):
        self.runner, self.ids, self.result = runner, ids, None
        self.hit, self.past, self.at = None, None, runner.prefix_cache.peek(ids)

    @property
    def left(self) -> int:
        return len(self.ids) - self.at

    def advance(self, n: int) -> bool:
        with self.runner._scoring():  # the tree the lookups walk and the forwards' ops: the scoring ones
            self._lookup()
            if self.at < len(self.ids):
                end = min(len(self.ids), self.at + max(1, n))
                self.past = self.runner.extend_prefix(self.past, self.ids[self.at:end])  # a KV tensor when graphed
                self.at = end
            return self._settle()

    def ride(self, n: int):
        """The next chunk as a :class:`~.score_graph.Ride` for a decode step's forward (``extend_prefix``'s graphed
        pass), or None (nothing left to compute, or the chunk goes no graph's way: ``advance`` runs it)."""
        with self.runner._scoring():
            self._lookup()
            m, end = self.at, min(len(self.ids), self.at + max(1, n))
            if m == len(self.ids) or not self.runner._graphed(m, end - m):
                return None
        return Ride(self.past, self.ids[m:end], list(range(m, end)),
                    torch.ones(end - m, end, dtype=torch.bool).tril_(m), [end - m - 1], end)

    def rode(self, ride) -> bool:
        """A ride's outputs applied (the chunk's KV continues the prompt's) -> whether the prompt is done."""
        self.past, self.at = ride.out[1], ride.keep
        with self.runner._scoring():
            return self._settle()

    def _lookup(self) -> None:
        if self.hit is None:
            self.hit = self.runner.prefix_cache.match(self.ids)
            self.at = self.hit.length
            self.past = self.hit.kv() if self.at else None  # a new tensor, ours

    def _settle(self) -> bool:
        if self.at < len(self.ids):
            return False
        store_pass(self.runner.prefix_cache, self.ids, self.past, after=self.hit)
        self.result = to_hf(self.past, copy=False) if isinstance(self.past, torch.Tensor) else self.past
        return True


def prefill_prompts(runner, ids_list: list[list[int]]) -> list:
    """Several decision prompts -> one transformers cache each: every prompt on its cached prefix, the prompts
    with the same cached prefix in one right-padded forward (a prompt cached whole needs none); stored."""
    cache = runner.prefix_cache
    hits = [cache.match(ids) for ids in ids_list]
    groups: dict[int, list[int]] = {}
    for i, h in enumerate(hits):
        groups.setdefault(id(h.block), []).append(i)
    out: list = [None] * len(ids_list)
    for rows in groups.values():
        m = hits[rows[0]].length
        past = hits[rows[0]].kv()
        todo = [i for i in rows if len(ids_list[i]) > m]
        for i in set(rows) - set(todo):
            out[i] = to_hf(past)
        if todo:
            for i, kv in zip(todo, _forward_rests(runner, [ids_list[i][m:] for i in todo], past)):
                out[i] = kv
    for ids, kv, h in zip(ids_list, out, hits):
        cache.insert(ids, lambda a, b, kv=kv: from_hf(kv, 0, a, b), after=h)
    return out


def _forward_rests(runner, rests: list[list[int]], past) -> list:
    """The prompts' rests after one shared ``past`` (or none) in one right-padded forward -> a cache per row."""
    m, n = (0 if past is None else int(past.shape[3])), max(len(r) for r in rests)
    ids = torch.zeros(len(rests), n, dtype=torch.long)
    att = torch.zeros(len(rests), m + n, dtype=torch.long)
    att[:, :m] = 1
    for b, row in enumerate(rests):
        ids[b, :len(row)] = torch.tensor(row)
        att[b, m:m + len(row)] = 1
    _, kv = runner.forward(to_device(ids, runner.device), None if past is None else to_hf(past, len(rests)),
                           attention_mask=to_device(att, runner.device), **runner._keep(1))
    return [DynamicCache(ddp_cache_data=[(lay.keys[b:b + 1, :, :m + len(row)], lay.values[b:b + 1, :, :m + len(row)])
                                         for lay in kv.layers]) for b, row in enumerate(rests)]


def cached_pass(cache: PrefixCache, ids: list[int], positions: list[int], allow: torch.Tensor, read: list[int],
                keep: int):
    """A scoring pass that starts with a ``keep``-token prompt (causal, positions 0..keep-1) and has no prefix
    cache yet: its cached part -> (the cached KV ``[layers, 2, kv_heads, m, head_dim]`` or None, ids, positions,
    allow, read) for the rest of the pass (the same keys: the cached tokens then the pass's own)."""
    hit = cache.match(ids[:keep], limit=min([keep, *read]))
    m = hit.length
    allow = rows_from(allow, keep, m, len(ids))  # the prompt's rows may be left implied (runner/allow.py)
    if not m:
        return None, ids, positions, allow, read
    return hit.kv(), ids[m:], positions[m:], allow, [r - m for r in read]


def store_pass(cache: PrefixCache, prompt: list[int], kv, after: Match = MISS) -> None:
    """Store the prompt's KV a scoring pass left (``kv``: a transformers cache of exactly that prompt, or its tensor
    ``[layers, 2, kv_heads, len(prompt), head_dim]``: the blocks are sliced from it, no restacking); ``after``: the
    lookup's hit the new blocks follow."""
    if isinstance(kv, torch.Tensor):
        cache.insert(prompt, lambda a, b: kv[:, :, :, a:b], after=after)
    else:
        cache.insert(prompt, lambda a, b: from_hf(kv, 0, a, b), after=after)
