"""Scoring passes: prefill the shared prompt once, then score every row of the plan in batched
forward passes that reuse the prefix KV cache. Every forward runs in the engine's model runner
(``engine.runner``: ``prefill_prefix``, ``score``, ``score_expand``); this module decides what goes in a
pass (token trees, masks, positions, chunks) and reads the log-probabilities out.

Ways to put many rows on one prefix (``packing``):
  ``fused``   the prompt and every row in ONE forward (:func:`score_contexts`, the prefix inside the
              first pass); falls back to ``packed`` chunks when the rows do not fit one pass
  ``packed``  all rows of a chunk in ONE sequence after the prefix, as a token tree (shared row
              prefixes fed once) with a 4-D attention mask (each token sees the prefix, its ancestors
              and itself) and per-token position ids; the prefix KV is never copied; the cache is
              cut back to the prefix afterwards.
  ``expand``  rows as a batch; the prefix KV is broadcast to the batch (materialized per chunk).
Rows are chunked to a memory budget; an out-of-memory error halves the chunk and retries (counted).

Several contexts (``decide_many``, :func:`score_contexts`): their common prompt prefix (system,
schema, questions: prompt layout 3) is computed once; contexts are packed side by side on its KV,
each its own tokens + its row tree, under a block mask. A dense additive mask over SDPA, not
``flex_attention``: the same code on the CPU and CUDA, and on CUDA the masked-out pairs cost FLOPs
only within one pass of at most :data:`MAX_PASS_TOKENS` queries.
"""

from __future__ import annotations

from dataclasses import dataclass
import time

import torch

from ..engine import Engine
from ..errors import TypedLMError
from ..runner.invariant.ops import log_softmax as invariant_log_softmax
from ..runner.tensors import device_tensor
from .plan import Plan, Row

PACKINGS = ("packed", "expand", "fused")
DEFAULT_PACKING = "auto"  # fused on CUDA; elsewhere fused on a cached prompt, else packed (ARCHITECTURE.md, "Decide")
DEFAULT_BUDGET_BYTES = 1 << 30  # activations + KV copies of one scoring pass


def resolve_packing(packing: str, engine: Engine, prompts=()) -> str:
    """``auto`` -> ``fused`` on CUDA, and off CUDA where the prefix cache holds at least half of the ``prompts``'
    shared prefix (:func:`mostly_cached`); else ``packed``."""
    if packing == "auto":
        return "fused" if engine.device.type == "cuda" or mostly_cached(engine, prompts) else "packed"
    if packing not in PACKINGS:
        raise TypedLMError(f"packing must be auto or one of {', '.join(PACKINGS)}, got {packing!r}")
    return packing


def mostly_cached(engine: Engine, prompts) -> bool:
    """Does the runner's prefix cache hold at least half of the prompts' shared prefix? Off CUDA the fused pass
    computes an uncached prompt under a dense mask (no causal skipping): 8 % slower than a causal prefill + the
    packed pass; on a cached prompt it is one forward of the rest and the rows instead of two (a later
    ``support_triage`` decision, SmolLM2-135M, 1 thread: 0.92 vs 1.02 s)."""
    if not engine.runner.capabilities.prefix_cache or not prompts:
        return False
    n = shared_prefix(list(prompts))
    return 2 * engine.runner.cached_prefix(list(prompts[0][:n])) >= n


@dataclass
class ScoreStats:
    rows: int = 0
    scored_tokens: int = 0  # tokens fed to scoring passes (packed: after prefix sharing; expand: incl. padding)
    passes: int = 0
    oom_retries: int = 0
    shared_prefix_tokens: int = 0  # prompt tokens read from a prefix KV computed once for several contexts
    chunk_rows: int = 0  # rows per pass actually used (after OOM halving)
    packing: str = DEFAULT_PACKING

    def as_dict(self) -> dict:
        return {"rows": self.rows, "scored_tokens": self.scored_tokens, "passes": self.passes,
                "oom_retries": self.oom_retries, "chunk_rows": self.chunk_rows, "packing": self.packing,
                "shared_prefix_tokens": self.shared_prefix_tokens}



def prefill(engine: Engine, ids: list[int]):
    """One forward over the prompt -> its prefix KV cache (an opaque runner object)."""
    return engine.runner.prefill_prefix(ids)


def prefill_batch(engine: Engine, ids_list: list[list[int]]) -> list:
    """Several prompts in one forward -> one prefix cache per prompt."""
    return engine.runner.prefill_prefixes(ids_list)


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


def _gather(engine: Engine, plan: Plan, part: list[Row], logits: torch.Tensor, where, contexts: int = 1,
            defer: bool = False):
    """logits rows at every read of ``part`` -> children log-probs (padded lm_head ids excluded), one
    dict per context: ``part`` is ``contexts`` equal blocks of rows, ``where(context, row, pos)`` the index
    of that read in ``logits``.
    ``defer``: return a function that copies them to the host then (no device sync before it is called)."""
    reads, idx, size = [], [], len(part) // contexts
    for r_i, row in enumerate(part):
        for point, pos in row.reads:
            reads.append((r_i // size, row.question, point))
            idx.append(where(r_i // size, r_i % size, pos))
    if logits.dim() == 3:  # [rows, reads, V] (expand): (row, read) -> a row of the flattened logits
        idx = [b * logits.shape[1] + j for b, j in idx]
    flat = logits.reshape(-1, logits.shape[-1])
    rows_t = flat.index_select(0, device_tensor(idx, flat.device)).float()[:, : engine.tokenizer_vocab_size]
    lsm = invariant_log_softmax(rows_t) if engine.runner.capabilities.invariant else torch.log_softmax(rows_t, -1)
    kids = [plan.questions[q].trie.points[p].children for _, q, p in reads]
    width = max(len(ch) for ch in kids)
    on_device = lsm.gather(1, device_tensor([list(ch) + [0] * (width - len(ch)) for ch in kids], lsm.device))

    def finish() -> list[dict]:
        picked = on_device.cpu()
        out: list[dict] = [{} for _ in range(contexts)]
        for k, (c, q, p) in enumerate(reads):
            out[c][(q, p)] = picked[k, : len(plan.questions[q].trie.points[p].children)]
        return out

    return finish if defer else finish()


def _pass_expand(engine: Engine, plan: Plan, part: list[Row], cache, prefix_len: int) -> tuple[dict, int]:
    B, L = len(part), max(len(r.ids) for r in part)
    ids = torch.zeros(B, L, dtype=torch.long)
    for b, r in enumerate(part):
        ids[b, : len(r.ids)] = torch.tensor(r.ids)  # right padding: causal rows never read it
    need = sorted({p for r in part for _, p in r.reads})
    at = {k: i for i, k in enumerate(need)}
    logits = engine.runner.score_expand(ids, cache, need)
    return _gather(engine, plan, part, logits, lambda _c, b, pos: (b, at[pos]))[0], B * L


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


def row_tree(plan: Plan):
    """:func:`_tree` of all the plan's rows at offset 0, built once per plan (callers only read it)."""
    tree = plan.memo.get("row_tree")
    if tree is None:
        tree = plan.memo["row_tree"] = _tree(list(plan.rows), 0)
    return tree


def _pass_packed(engine: Engine, plan: Plan, part: list[Row], cache, prefix_len: int) -> tuple[dict, int]:
    """All rows of ``part`` in one sequence on the cached prefix (see :func:`_tree`)."""
    ids, pos, allow, row_nodes = _tree(part, prefix_len)
    need = sorted({row_nodes[b][p] for b, r in enumerate(part) for _, p in r.reads})
    at = {k: i for i, k in enumerate(need)}
    logits, _ = engine.runner.score(ids, cache, pos, allow, need)
    return _gather(engine, plan, part, logits, lambda _c, b, p: at[row_nodes[b][p]])[0], len(ids)


def shared_prefix(ids_all: list[list[int]]) -> int:
    """Length of the longest common token prefix of the prompts (one prompt: all of it). The prompt
    layout puts system + schema + questions before the per-context fence, so it is at least that part."""
    first = ids_all[0]
    n = min(len(i) for i in ids_all)
    for k in range(n):
        if any(ids[k] != first[k] for ids in ids_all[1:]):
            return k
    return n


def _pass_bytes(engine: Engine, q: int, k: int, reads: int) -> int:
    """Memory of one pass with ``q`` query tokens over ``k`` keys reading ``reads`` logits rows: the
    logits (fp32 log-softmax), the additive mask (+ its bool form), the new KV and, off CUDA (SDPA's math
    kernel), the attention scores; CUDA's memory-efficient kernel does not materialize them."""
    scores = 0 if engine.device.type == "cuda" else 4 * engine.attn_heads
    logit_rows = reads if engine.runner.keeps_logits else q
    return logit_rows * engine.model_vocab_size * 4 + q * k * (scores + torch.finfo(engine.dtype).bits // 8 + 1) \
        + q * engine.kv_bytes_per_token


MAX_PASS_TOKENS = 2048  # query tokens of one shared-prefix pass: enough for full-size GEMMs, while the dense
# mask's wasted attention (every query against every key of the pass) stays a small share of the FLOPs


@torch.inference_mode()
def score_contexts(engine: Engine, plan: Plan, ids_all: list[list[int]], *, fused: bool,
                   budget_bytes: int = DEFAULT_BUDGET_BYTES, stats: list[ScoreStats] | None = None,
                   timings: list[dict] | None = None) -> list[dict | None]:
    """Every row of the plan on every prompt, the prompts' common prefix computed ONCE.

    The prefix (:func:`shared_prefix`) is prefilled once (``fused``: inside the first pass); then
    contexts are packed together, as many as fit ``budget_bytes`` and :data:`MAX_PASS_TOKENS`, into
    one sequence on the prefix KV (never copied): per context its own prompt tokens (causal) and its
    row tree (:func:`_tree`), under a block mask (a token sees the prefix, its own context's earlier
    tokens and its ancestors) with per-token positions. Returns per prompt {(question, point):
    children log-probs}, or None where the prompt's rows do not fit one pass (the caller prefills it
    and scores its rows in chunks). One prompt, ``fused``: prompt + rows in one forward; not fused:
    prefill + one packed pass. ``timings[i]`` gets ``prefill`` (the prefix's share) and ``scoring``
    (the context's share of its pass) in seconds."""
    n = len(ids_all)
    stats = stats if stats is not None else [ScoreStats() for _ in ids_all]
    timings = timings if timings is not None else [{} for _ in ids_all]
    rows = list(plan.rows)
    P = shared_prefix(ids_all) if n > 1 else len(ids_all[0])
    if P == 0:
        return [None] * n
    prefix = ids_all[0][:P]
    tree = row_tree(plan)
    T = len(tree[0])
    R = sum(len(r.reads) for r in rows)

    def fits(group: list[int], with_prefix: bool) -> bool:
        q = sum(len(ids_all[i]) - P + T for i in group) + (P if with_prefix else 0)
        return len(group) == 1 or (q <= MAX_PASS_TOKENS and
                                   _pass_bytes(engine, q, P + q - (P if with_prefix else 0), R * len(group))
                                   <= budget_bytes)

    out: list[dict | None] = [None] * n
    todo = [i for i in range(n) if _pass_bytes(engine, len(ids_all[i]) - P + T + (P if fused else 0),
                                                len(ids_all[i]) + T, R) <= budget_bytes]
    if not todo:
        return out
    cache = None
    t0 = time.perf_counter()
    if not fused:
        cache = prefill(engine, prefix)
        engine.sync()
    prefix_s = time.perf_counter() - t0
    groups: list[list[int]] = []
    for i in todo:  # consecutive contexts, greedily
        if groups and fits(groups[-1] + [i], fused and len(groups) == 1):
            groups[-1].append(i)
        else:
            groups.append([i])
    done: list[tuple[list[int], object]] = []  # passes are queued back to back; results copied at the end
    while groups:
        group = groups.pop(0)
        try:
            picked, cache = _pass_contexts(engine, plan, [ids_all[i][P:] for i in group], prefix, cache, tree)
        except Exception as e:  # noqa: BLE001 - only out-of-memory is retried
            if not _is_oom(e):
                raise
            if engine.device.type == "cuda":
                torch.cuda.empty_cache()
            stats[group[0]].oom_retries += 1
            if len(group) > 1:
                groups[:0] = [group[: len(group) // 2], group[len(group) // 2:]]
            continue  # a single context that does not fit: left to the caller (None)
        done.append((group, picked))
    for group, finish in done:
        for i, got in zip(group, finish()):
            out[i] = got
    took = time.perf_counter() - t0 - prefix_s
    scored = [i for i in range(n) if out[i] is not None]
    for i in scored:
        st = stats[i]
        st.packing = "fused" if fused else "packed"
        st.passes, st.rows, st.chunk_rows = 1, len(rows), len(rows)
        st.scored_tokens = T
        st.shared_prefix_tokens = P if n > 1 else 0
        if fused and n == 1:  # one fused forward: all of it is the prompt's read
            timings[i].update(prefill=took, scoring=0.0)
        else:  # the prefix prefill and the passes, shared evenly
            timings[i].update(prefill=prefix_s / n, scoring=took / len(scored))
    return out


def _pass_contexts(engine: Engine, plan: Plan, suffixes: list[list[int]], prefix: list[int], cache, tree):
    """One forward: [prefix, when ``cache`` is None] + per context (its own tokens, the row tree).
    Returns the picked log-probs per context and the cache cut back to the prefix."""
    row_ids, row_pos, row_allow, row_nodes = tree
    P, T = len(prefix), len(row_ids)
    lead = P if cache is None else 0  # prefix tokens inside this forward
    ids, pos, starts = (list(prefix), list(range(P)), []) if lead else ([], [], [])
    for suf in suffixes:
        starts.append(len(ids) + len(suf))  # where the context's row tree starts
        ids += suf + row_ids
        pos += list(range(P, P + len(suf))) + [P + len(suf) + d for d in row_pos]
    Q = len(ids)
    # keys: the prefix, then this forward's other tokens; rows: this forward's tokens after the prefix (the prefix's
    # own rows, when it is inside, are causal: left implied, runner/allow.py)
    allow = torch.zeros(Q - lead, P + Q - lead, dtype=torch.bool)
    allow[:, :P] = True
    for st, suf in zip(starts, suffixes):
        s, a = len(suf), st - len(suf) - lead  # the context's first own token: row a, key column k
        k = P + a
        allow[a:a + s, k:k + s] = torch.ones(s, s, dtype=torch.bool).tril_()
        allow[a + s:a + s + T, k:k + s] = True
        allow[a + s:a + s + T, k + s:k + s + T] = row_allow
    rows = list(plan.rows)
    need = sorted({st + row_nodes[b][p] for st in starts for b, r in enumerate(rows) for _, p in r.reads})
    at = {k: i for i, k in enumerate(need)}
    logits, cache = engine.runner.score(ids, cache, pos, allow, need, keep=P)
    picked = _gather(engine, plan, rows * len(suffixes), logits,
                     lambda c, b, p: at[starts[c] + row_nodes[b][p]], contexts=len(suffixes), defer=True)
    return picked, cache
