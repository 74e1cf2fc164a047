"""MLXRunner: the :class:`~typedlm.runner.model_runner.ModelRunner` contract on Apple's MLX.

mlx-lm's model code, loader and KV caches (``KVCache`` per layer for prefixes, ``BatchKVCache`` per
layer for decode: :class:`~typedlm.runner.mlx_kv.MLXKV`); no architecture is written here. Decode logits
stay MLX arrays (the MLX sampler reads them on the device); scoring logits come back as float32 torch CPU
tensors (one numpy copy), so decision scoring runs unchanged.

Scoring: mlx-lm's model call takes a cache but neither an attention mask nor position ids (RoPE
positions are the cache offset + the token's index). ``score_expand`` (rows as a batch on a broadcast
prefix, causal) fits that call as it is. ``score``'s packed token tree (a ``[Q, K]`` allowed-attention
matrix + per-token positions) does not, so the runner turns it back into the chains it encodes: each read
token's visible pass tokens, in order, form a causal run after the prefix at positions ``P + j``
(checked: any other mask is a :class:`TypedLMError`, never a silent change of meaning); the chains run
as one right-padded batch on the broadcast prefix. Same math, more tokens than the packed tree (shared
row prefixes are fed once per chain).

Threads: one lock serializes every model call (the server's decode thread and a decision's thread). MLX
evaluates a lazy array only on the thread that built it (its stream is thread-local), so whatever goes into
a forward is evaluated first where it was built (the server runs decision forwards on its decode thread).
mlx is imported only here and in ``mlx_kv`` (the base package never imports it).
"""

from __future__ import annotations

import copy
from pathlib import Path
import threading
from typing import Callable

import mlx.core as mx
import numpy as np
import torch

from ..errors import ModelLoadError, TypedLMError
from .allow import rows_from
from .contract import Capabilities, Whole
from .mlx_kv import MLXKV, to_torch

MX_DTYPES = {torch.float32: mx.float32, torch.float16: mx.float16, torch.bfloat16: mx.bfloat16}
LOGIT_BYTES = 256 << 20  # one chunk of chains' logits (score)
NO_LOGITS = object()  # forward's pick: feed the cache only (the lm_head never runs)


def load_model(path: str, dtype: torch.dtype | None = None):
    """mlx-lm's loader on a HF or MLX (also quantized) directory -> (model, torch dtype of its activations)."""
    from mlx.utils import tree_flatten  # optional extra: mlx
    from mlx_lm.utils import load_model as mlx_load  # optional extra: mlx

    try:
        model, _ = mlx_load(Path(path))
    except (ValueError, FileNotFoundError, KeyError) as e:
        raise ModelLoadError(f"mlx-lm could not load {path}: {e}") from e
    if dtype is not None:
        model.set_dtype(MX_DTYPES[dtype])
    if mx.default_device() == mx.cpu:
        blas_layout(model)
    floats = [v.dtype for _, v in tree_flatten(model.parameters()) if mx.issubdtype(v.dtype, mx.floating)]
    found = {v: k for k, v in MX_DTYPES.items()}.get(floats[0] if floats else mx.float32, torch.float32)
    return model, found


def blas_layout(model) -> int:
    """Store every float32 ``Linear`` / ``Embedding`` weight ``[out, in]`` as the transposed view of an
    ``[in, out]`` array (same values, same model code) -> how many were changed. mlx-lm computes
    ``x @ W.T``; on the CPU mlx hands that to the BLAS it ships (the reference netlib BLAS in the Linux
    wheel) with a transpose flag, and that BLAS's transposed loops are far slower than its plain ones
    (likely: dot products left scalar vs vectorized axpys). With this layout ``W.T`` is contiguous: no
    flag, the same terms summed in the same order (default model: logits max diff 0.0). Only on the CPU device (Metal has its own GEMM; no Mac here)."""
    import mlx.nn as nn  # optional extra: mlx

    n = 0
    for _, mod in model.named_modules():
        w = getattr(mod, "weight", None)
        if type(mod) in (nn.Linear, nn.Embedding) and w is not None and w.ndim == 2 and w.dtype == mx.float32:
            mod.weight = mx.contiguous(w.T).T
            mx.eval(mod.weight)  # one weight at a time: the old copy goes before the next is made
            n += 1
    return n


class MLXRunner:
    backend = "mlx"
    prefix_cache = None  # no prompt KV across requests
    invariant_reason = "the MLX backend has no batch-invariant kernels"
    capabilities = Capabilities(backend="mlx", cuda_graphs=False, invariant=False, deterministic=False,
                                prefix_cache=False, device_feed=False)

    def __init__(self, model, *, dtype: torch.dtype, max_context: int, vocab: int):
        from mlx_lm.models.cache import KVCache, make_prompt_cache  # optional extra: mlx

        self.model, self.dtype, self.max_context, self.vocab = model, dtype, max_context, vocab
        self.device = torch.device("cpu")  # where logits land
        kinds = {type(c).__name__ for c in make_prompt_cache(model)}
        if kinds != {KVCache.__name__}:
            raise ModelLoadError(f"the MLX backend batches models with plain KV caches only (this one has {kinds})")
        self.layers = len(make_prompt_cache(model))
        self._lock = threading.RLock()
        self._split = body_and_head(model)
        self.keeps_logits = self._split is not None  # the lm_head only at the positions read (decide's estimate)

    # -- the model call -------------------------------------------------------------------------------
    def forward(self, input_ids: mx.array, cache=None, pick: Callable | None = None, wait: bool = True, **kwargs):
        """One model call -> (logits ``[B, T, V]``, or ``pick(logits)`` evaluated, or None with
        ``pick=NO_LOGITS``: only the cache is evaluated; the cache, a new one if None). ``pick`` selects rows
        and positions only (never the vocabulary axis), so it commutes with the lm_head: where the model splits
        into body and head (:func:`body_and_head`) the head runs on the picked hidden states only (MLX does
        not push a slice through a matmul). ``wait=False`` (decode steps) queues the work
        (``mx.async_eval``) and returns at once; the sampler's one ``.tolist()`` waits."""
        if kwargs:
            raise TypedLMError(f"the MLX model call takes no {sorted(kwargs)}")
        cache = cache if cache is not None else self.new_cache()
        with self._lock:
            if self._split is not None and pick is not None:
                body, head = self._split
                h = body(input_ids, cache=cache)
                logits = None if pick is NO_LOGITS else head(pick(h))
            else:
                logits = self.model(input_ids, cache=cache)
                logits = None if pick is NO_LOGITS else pick(logits) if pick is not None else logits
            (mx.eval if wait else mx.async_eval)([c.state for c in cache], *([] if logits is None else [logits]))
        return logits, cache

    def last_logits(self, input_ids: mx.array, cache=None):
        """Rows ``[B, T]`` fed into ``cache`` -> (logits after each row's last token ``[B, V]``, the cache).
        The lm_head runs on the last position only: one call on a split model, else the body first without
        the lm_head (mlx-lm's own prefill does the same; the head was 35 % of a 42-token prefill here)."""
        mx.eval(input_ids)  # built here; the forward may run on another thread (module docstring)
        if self._split is None and input_ids.shape[1] > 1:
            _, cache = self.forward(input_ids[:, :-1], cache, pick=NO_LOGITS)
            input_ids = input_ids[:, -1:]
            mx.eval(input_ids)
        return self.forward(input_ids, cache, pick=lambda lg: lg[:, -1])

    def wrapped(self, wrap: Callable) -> "MLXRunner":
        view = copy.copy(self)
        view.forward = wrap
        return view

    def weight_samples(self, n: int):
        """(name, shape, first ``n`` values as float32 numpy) of every weight (a model fingerprint)."""
        from mlx.utils import tree_flatten  # optional extra: mlx

        for name, p in tree_flatten(self.model.parameters()):
            yield name, tuple(p.shape), np.array(p.reshape(-1)[:n].astype(mx.float32))

    def sync(self) -> None:
        """Every forward is evaluated before it returns."""

    def new_cache(self) -> list:
        from mlx_lm.models.cache import KVCache  # optional extra: mlx

        return [KVCache() for _ in range(self.layers)]

    def batch_cache(self, rows: int) -> list:
        from mlx_lm.models.cache import BatchKVCache  # optional extra: mlx

        return [BatchKVCache([0] * rows) for _ in range(self.layers)]

    # -- decode -----------------------------------------------------------------------------------------
    def decode_cache(self, max_batch: int, *, dynamic: bool = False) -> MLXKV:
        return MLXKV(self, capacity=max_batch, max_len=self.max_context)

    @property
    def static_kv(self):
        return None

    @property
    def static_reason(self) -> str:
        return "the MLX backend decodes on mlx-lm's batch cache"

    def forwards(self, kv: MLXKV) -> MLXKV:
        """The MLX cache is laid out by mlx-lm's batch cache it feeds: it runs its own forwards (through ``forward``)."""
        return kv

    def prefill(self, kv: MLXKV, prompts: list[list[int]], slots: list[int]) -> mx.array:
        return kv.prefill(prompts, slots)

    def step_ids(self, kv: MLXKV, ids, slots: list[int]) -> mx.array:
        """No device feed here (``capabilities.device_feed`` is False): the ids as host ints."""
        return kv.step([int(i) for i in ids], slots)

    def graph_stats(self, kv: MLXKV) -> tuple[int, float]:
        return 0, 0.0

    def set_deterministic(self, on: bool) -> bool:
        """Never on: the MLX backend has no batch-invariant kernels."""
        return False

    def cached_prefix(self, ids: list[int]) -> int:
        return 0

    def run(self, kv: MLXKV, feeds: list[list[int]], slots: list[int], every: bool = False) -> mx.array:
        if every or any(len(f) != 1 for f in feeds):
            return kv.extend(feeds, slots, every)
        return kv.step([f[0] for f in feeds], slots)

    def capture(self, kv: MLXKV, max_tokens: int | None = None) -> float:
        return 0.0

    # -- scoring (decisions) -----------------------------------------------------------------------------
    def prefill_prefix(self, ids: list[int]) -> list:
        if len(ids) >= self.max_context:
            raise TypedLMError(f"decision prompt has {len(ids)} tokens; the model's context is {self.max_context}")
        return self.last_logits(mx.array([ids]))[1]

    def prompt_prefill(self, ids: list[int]) -> Whole:
        """``prefill_prefix(ids)`` as a job a scheduler runs whole (mlx-lm's cache is not cut here)."""
        return Whole(len(ids), self.prefill_prefix, ids)

    def prefill_prefixes(self, ids_list: list[list[int]]) -> list:
        """One prefill per prompt (the MLX backend's first version does not batch these)."""
        return [self.prefill_prefix(ids) for ids in ids_list]

    def score_expand(self, rows: torch.Tensor, prefix, read: list[int]) -> torch.Tensor:
        return to_torch(self._on_prefix(mx.array(rows.tolist()), prefix, lambda lg: lg[:, mx.array(read)]))

    def score(self, ids: list[int], prefix, positions: list[int], allow: torch.Tensor, read: list[int],
              keep: int | None = None):
        """See the torch runner's ``score``; here the tree runs as its chains (module docstring). The
        prefix cache is never written, so it needs no cutting back."""
        P = prefix_length(prefix) if prefix is not None else 0
        if prefix is None and keep:
            allow = rows_from(allow, keep, 0, len(ids))  # the prompt's rows may be left implied
        vis = allow.cpu().numpy()
        if P and not vis[:, :P].all():
            raise TypedLMError("the MLX runner scores passes that see the whole prefix only")
        chains, where = _chains(vis[:, P:], read)
        for chain in chains:
            if [positions[t] for t in chain] != list(range(P, P + len(chain))):
                raise TypedLMError("the MLX runner scores token trees at consecutive positions only")
        out = None
        step = max(1, LOGIT_BYTES // (max(map(len, chains)) * 4 * self.vocab))
        for lo in range(0, len(chains), step):
            part = chains[lo: lo + step]
            L = max(map(len, part))
            mine = [(i, ci - lo, pi) for i, (ci, pi) in enumerate(where) if lo <= ci < lo + step]
            at = mx.array([m[1] for m in mine]), mx.array([m[2] for m in mine])
            got = to_torch(self._on_prefix(mx.array([[ids[t] for t in c] + [0] * (L - len(c)) for c in part]),
                                           prefix, lambda lg: lg[at]))
            out = torch.empty(len(read), got.shape[-1]) if out is None else out
            out[[m[0] for m in mine]] = got
        if prefix is None and keep is not None:
            return out, self.prefill_prefix(ids[:keep])
        return out, prefix

    def _on_prefix(self, rows: mx.array, prefix, pick: Callable) -> mx.array:
        """Rows ``[B, L]`` (right-padded) causally after ``prefix`` broadcast to the batch -> ``pick(logits)``."""
        from mlx_lm.models.cache import KVCache  # optional extra: mlx

        B = rows.shape[0]
        P = prefix_length(prefix) if prefix is not None else 0
        cache = []
        for layer in prefix or [None] * self.layers:
            c = KVCache()
            if P:
                k, v = layer.keys[..., :P, :], layer.values[..., :P, :]
                c.keys = mx.broadcast_to(k, (B, *k.shape[1:]))
                c.values = mx.broadcast_to(v, (B, *v.shape[1:]))
                c.offset = P
            cache.append(c)
        mx.eval([c.state for c in cache if c.keys is not None])  # built here; the forward may run on another thread
        logits, _ = self.forward(rows, cache, pick=pick)
        return logits


def body_and_head(model):
    """(the model without its lm_head, the lm_head) when mlx-lm's model has that common shape (``model.model``
    then ``lm_head`` or the tied ``embed_tokens.as_linear``) and a 3-token check gives the model's own
    logits; else None (the whole model is called; a softcap or scale after the head stays correct)."""
    body = getattr(model, "model", None)
    head = getattr(model, "lm_head", None)  # a Module is a dict: test for None, not truth
    if head is None:
        head = getattr(getattr(body, "embed_tokens", None), "as_linear", None)
    if body is None or head is None:
        return None
    x = mx.array([[1, 2, 3]])
    try:
        same = mx.allclose(model(x), head(body(x)), rtol=0, atol=0).item()
    except (TypeError, ValueError, AttributeError):
        return None
    return (body, head) if same else None


def prefix_length(cache) -> int:
    return int(cache[0].offset)


def _chains(vis: np.ndarray, read: list[int]) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """The causal chains a tree mask encodes (``vis``: ``[Q, Q]`` pass-token visibility) -> (chains,
    ``where[i]`` = (chain, index in it) of ``read[i]``). Longest first, so one chain serves every read on it."""
    chains: list[list[int]] = []
    seat: dict[int, tuple[int, int]] = {}
    order = sorted(range(len(read)), key=lambda i: -int(vis[read[i]].sum()))
    for i in order:
        r = read[i]
        if r in seat:
            continue
        chain = [int(t) for t in np.nonzero(vis[r])[0]]
        sub = vis[np.ix_(chain, chain)]
        own = vis[chain].sum(axis=1)  # each chain token sees its chain so far and nothing else
        if not chain or chain[-1] != r or not np.array_equal(sub, np.tril(np.ones_like(sub))) \
                or not np.array_equal(own, np.arange(1, len(chain) + 1)):
            raise TypedLMError("the MLX runner scores token-tree masks only (each token sees its ancestors)")
        for j, t in enumerate(chain):
            seat.setdefault(t, (len(chains), j))
        chains.append(chain)
    return chains, [seat[r] for r in read]
