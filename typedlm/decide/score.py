"""Scoring passes: prefill the shared prompt once, then score every row of the plan in batched
forward passes that reuse the prefix KV cache.

Ways to put many rows on one prefix (``packing``):
  ``fused``   the prompt and every row in ONE forward (:func:`score_fused`); falls back to
              ``packed`` when the rows do not fit one pass
  ``packed``  all rows of a chunk in ONE sequence after the prefix, as a token tree (shared row
              prefixes fed once) with a 4-D attention mask (each token sees the prefix, its ancestors
              and itself) and per-token position ids; the prefix KV is never copied; the cache is
              cut back to the prefix afterwards.
  ``expand``  rows as a batch; the prefix KV is broadcast to the batch (materialized per chunk).
Rows are chunked to a memory budget; an out-of-memory error halves the chunk and retries (counted).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..engine import Engine
from ..errors import TypedLMError
from .plan import Plan, Row

PACKINGS = ("packed", "expand", "fused")
DEFAULT_PACKING = "auto"  # fused on CUDA, packed elsewhere: chosen by measurement (ARCHITECTURE.md, "Decisions")


def resolve_packing(packing: str, engine: Engine) -> str:
    if packing == "auto":
        return "fused" if engine.device.type == "cuda" else "packed"
    if packing not in PACKINGS:
        raise TypedLMError(f"packing must be auto or one of {', '.join(PACKINGS)}, got {packing!r}")
    return packing
DEFAULT_BUDGET_BYTES = 1 << 30  # activations + KV copies of one scoring pass


@dataclass
class ScoreStats:
    rows: int = 0
    scored_tokens: int = 0  # tokens fed to scoring passes (packed: after prefix sharing; expand: incl. padding)
    passes: int = 0
    oom_retries: int = 0
    chunk_rows: int = 0  # rows per pass actually used (after OOM halving)
    packing: str = DEFAULT_PACKING

    def as_dict(self) -> dict:
        return {"rows": self.rows, "scored_tokens": self.scored_tokens, "passes": self.passes,
                "oom_retries": self.oom_retries, "chunk_rows": self.chunk_rows, "packing": self.packing}



def _keep(engine: Engine, positions) -> dict:
    return {"logits_to_keep": positions} if engine.keeps_logits else {}


@torch.inference_mode()
def prefill(engine: Engine, ids: list[int]):
    """One forward over the prompt -> its KV cache (logits are not needed: rows start with a cue)."""
    if len(ids) >= engine.max_context:
        raise TypedLMError(f"decision prompt has {len(ids)} tokens; the model's context is {engine.max_context}")
    _, cache = engine.forward(torch.tensor([ids], device=engine.device), **_keep(engine, 1))
    return cache


@torch.inference_mode()
def prefill_batch(engine: Engine, ids_list: list[list[int]]) -> list:
    """Several prompts in one right-padded forward -> one prefix cache per prompt (views, cut to its length)."""
    from transformers import DynamicCache

    if len(ids_list) == 1:
        return [prefill(engine, ids_list[0])]
    n = max(len(i) for i in ids_list)
    ids = torch.zeros(len(ids_list), n, dtype=torch.long)
    att = torch.zeros(len(ids_list), n, dtype=torch.long)
    for b, row in enumerate(ids_list):
        ids[b, : len(row)] = torch.tensor(row)
        att[b, : len(row)] = 1
    dev = engine.device
    _, cache = engine.forward(ids.to(dev), attention_mask=att.to(dev), **_keep(engine, 1))
    return [DynamicCache(ddp_cache_data=[(lay.keys[b:b + 1, :, : len(row)], lay.values[b:b + 1, :, : len(row)])
                                         for lay in cache.layers]) for b, row in enumerate(ids_list)]


def chunk_rows(engine: Engine, rows: list[Row], prefix_len: int, packing: str, budget: int) -> int:
    """How many rows fit one pass under ``budget`` bytes (at least 1)."""
    if not rows:
        return 1
    kv, heads = engine.kv_bytes_per_token, engine.attn_heads
    L = max(len(r.ids) for r in rows)
    if packing == "expand":
        per_row = (prefix_len + L) * kv + L * engine.model_vocab_size * 4
        return max(1, min(len(rows), budget // per_row))
    n, total = 0, 0
    for r in rows:  # packed: logits + mask + attention scores grow with the packed length T
        total += len(r.ids)
        cost = total * engine.model_vocab_size * 4 + total * (prefix_len + total) * (4 * heads + 4) + total * kv
        if cost > budget and n:
            break
        n += 1
    return n


def _is_oom(e: BaseException) -> bool:
    if isinstance(e, torch.OutOfMemoryError):
        return True
    return isinstance(e, RuntimeError) and "can't allocate memory" in str(e)


@torch.inference_mode()
def score_rows(engine: Engine, plan: Plan, cache, prefix_len: int, *, packing: str = DEFAULT_PACKING,
               budget_bytes: int = DEFAULT_BUDGET_BYTES, max_rows: int | None = None,
               stats: ScoreStats | None = None) -> dict[tuple[int, int], torch.Tensor]:
    """Every row of the plan -> {(question, branch point): log-probabilities of its allowed children}."""
    if packing not in PACKINGS:
        raise TypedLMError(f"packing must be one of {', '.join(PACKINGS)}, got {packing!r}")
    stats = stats or ScoreStats()
    stats.packing = "packed" if packing == "fused" else packing  # fused reaching here = its fallback
    rows = list(plan.rows)
    chunk = chunk_rows(engine, rows, prefix_len, packing, budget_bytes)
    if max_rows:
        chunk = min(chunk, max_rows)
    out: dict[tuple[int, int], torch.Tensor] = {}
    i = 0
    while i < len(rows):
        part = rows[i:i + chunk]
        try:
            run = _pass_expand if packing == "expand" else _pass_packed
            picked, fed = run(engine, plan, part, cache, prefix_len)
            out.update(picked)
        except Exception as e:  # noqa: BLE001 - only out-of-memory is retried; everything else re-raised
            if not _is_oom(e):
                raise
            _truncate(cache, prefix_len)
            if engine.device.type == "cuda":
                torch.cuda.empty_cache()
            if chunk == 1:
                raise TypedLMError("out of memory scoring a single decision row: shorten the context") from e
            chunk = max(1, chunk // 2)
            stats.oom_retries += 1
            continue
        stats.passes += 1
        stats.rows += len(part)
        stats.scored_tokens += fed
        i += len(part)
    stats.chunk_rows = chunk
    return out


def _gather(engine: Engine, plan: Plan, part: list[Row], logits: torch.Tensor, where) -> dict:
    """logits rows at every read of ``part`` -> children log-probs (padded lm_head ids excluded)."""
    reads, idx = [], []
    for r_i, row in enumerate(part):
        for point, pos in row.reads:
            reads.append((row.question, point))
            idx.append(where(r_i, pos))
    rows_t = torch.stack([logits[b, t] for b, t in idx]).float()[:, : engine.tokenizer_vocab_size]
    lsm = torch.log_softmax(rows_t, dim=-1)
    width = max(len(plan.questions[q].trie.points[p].children) for q, p in reads)
    index = torch.zeros(len(reads), width, dtype=torch.long)
    for k, (q, p) in enumerate(reads):
        ch = plan.questions[q].trie.points[p].children
        index[k, : len(ch)] = torch.tensor(ch)
    picked = lsm.gather(1, index.to(lsm.device)).cpu()
    return {(q, p): picked[k, : len(plan.questions[q].trie.points[p].children)] for k, (q, p) in enumerate(reads)}


def _pass_expand(engine: Engine, plan: Plan, part: list[Row], cache, prefix_len: int) -> tuple[dict, int]:
    from transformers import DynamicCache

    B, L = len(part), max(len(r.ids) for r in part)
    ids = torch.zeros(B, L, dtype=torch.long)
    for b, r in enumerate(part):
        ids[b, : len(r.ids)] = torch.tensor(r.ids)  # right padding: causal rows never read it
    layers = [(lay.keys.expand(B, -1, -1, -1), lay.values.expand(B, -1, -1, -1)) for lay in cache.layers]
    need = sorted({p for r in part for _, p in r.reads})
    at = {k: i for i, k in enumerate(need)} if engine.keeps_logits else {k: k for k in need}
    logits, _ = engine.forward(ids.to(engine.device), DynamicCache(ddp_cache_data=layers),
                               **_keep(engine, torch.tensor(need, device=engine.device)))
    return _gather(engine, plan, part, logits, lambda b, pos: (b, at[pos])), B * L


def _tree(part: list[Row], P: int):
    """Rows as a token tree after a P-token prefix: rows that share a prefix (every cue starts with
    ``{"``; the option rows of a multi field share ``{"field":{"``) feed it once. Returns the node ids,
    position ids (P + depth), the [T, P + T] allowed-attention matrix (prefix, ancestors, self) and each
    row's node indices."""
    node_of: dict[tuple, int] = {}
    ids, pos, parent, row_nodes = [], [], [], []
    for r in part:
        nodes: list[int] = []
        for j in range(len(r.ids)):
            key = r.ids[: j + 1]
            k = node_of.get(key)
            if k is None:
                k = node_of[key] = len(ids)
                ids.append(r.ids[j])
                pos.append(P + j)
                parent.append(nodes[-1] if nodes else -1)
            nodes.append(k)
        row_nodes.append(nodes)
    T = len(ids)
    allow = torch.zeros(T, P + T, dtype=torch.bool)
    allow[:, :P] = True
    for k in range(T):  # parents come before children: inherit the parent's row, add self
        if parent[k] >= 0:
            allow[k, P:] = allow[parent[k], P:]
        allow[k, P + k] = True
    return ids, pos, allow, row_nodes


def _additive(allow: torch.Tensor, engine: Engine) -> torch.Tensor:
    mask = torch.zeros(allow.shape, dtype=engine.dtype)
    return mask.masked_fill_(~allow, torch.finfo(engine.dtype).min)[None, None].to(engine.device)


def _pass_packed(engine: Engine, plan: Plan, part: list[Row], cache, prefix_len: int) -> tuple[dict, int]:
    """All rows of ``part`` in one sequence on the cached prefix (see :func:`_tree`)."""
    P = prefix_len
    ids, pos, allow, row_nodes = _tree(part, P)
    dev = engine.device
    try:
        need = sorted({row_nodes[b][p] for b, r in enumerate(part) for _, p in r.reads})
        keep = engine.keeps_logits
        at = {k: i for i, k in enumerate(need)} if keep else {k: k for k in need}
        logits, _ = engine.forward(torch.tensor([ids], device=dev), cache,
                                   position_ids=torch.tensor([pos], device=dev),
                                   attention_mask=_additive(allow, engine),
                                   **_keep(engine, torch.tensor(need, device=dev)))
        return _gather(engine, plan, part, logits, lambda b, p: (0, at[row_nodes[b][p]])), len(ids)
    finally:
        _truncate(cache, P)


@torch.inference_mode()
def score_fused(engine: Engine, plan: Plan, prompt: list[int], *, budget_bytes: int = DEFAULT_BUDGET_BYTES,
                stats: ScoreStats | None = None) -> dict | None:
    """The prompt AND every row in ONE forward (causal prompt, then the row tree). On a launch-bound
    GPU this saves a whole forward pass. Returns None when the rows do not fit one pass under the
    budget (the caller then prefills and scores in ``packed`` chunks)."""
    rows = list(plan.rows)
    P = len(prompt)
    if chunk_rows(engine, rows, P, "packed", budget_bytes) < len(rows):
        return None
    ids, pos, allow, row_nodes = _tree(rows, P)
    full = torch.zeros(P + len(ids), P + len(ids), dtype=torch.bool)
    full[:P, :P] = torch.ones(P, P, dtype=torch.bool).tril_()
    full[P:] = allow
    dev = engine.device
    need = sorted({P + row_nodes[b][p] for b, r in enumerate(rows) for _, p in r.reads})
    keep = engine.keeps_logits
    at = {k: i for i, k in enumerate(need)} if keep else {k: k for k in need}
    logits, _ = engine.forward(torch.tensor([prompt + ids], device=dev),
                               position_ids=torch.tensor([list(range(P)) + pos], device=dev),
                               attention_mask=_additive(full, engine),
                               **_keep(engine, torch.tensor(need, device=dev)))
    picked = _gather(engine, plan, rows, logits, lambda b, p: (0, at[P + row_nodes[b][p]]))
    if stats is not None:
        stats.packing = "fused"
        stats.passes, stats.rows, stats.scored_tokens, stats.chunk_rows = 1, len(rows), len(ids), len(rows)
    return picked


def _truncate(cache, prefix_len: int) -> None:
    """Put the prefix cache back to exactly the prefix (after a packed pass or a failed one)."""
    for lay in cache.layers:
        if getattr(lay, "keys", None) is not None and lay.keys.numel() and lay.keys.shape[-2] > prefix_len:
            lay.keys = lay.keys[..., :prefix_len, :]
            lay.values = lay.values[..., :prefix_len, :]
