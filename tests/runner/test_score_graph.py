"""The graphed invariant scoring pass on a cached prefix (runner/score_graph.py): the same bits as the eager pass.

On the CPU the graph's code runs eagerly at the padded bucket sizes (the torch invariant ops), so these tests check
what makes the CUDA graph exact: padding rows, the prefix copied into the static buffer, the pass's K/V placed at
its columns, the lm_head's rows; the capture itself is checked on the H200 (bench/gpu_check.py)."""

import pytest
import torch

from typedlm.decide import decide
from typedlm.runner import score_graph
from typedlm.testing import tiny_engine

SCHEMA = {"description": "Triage a support ticket.", "fields": {
    "urgent": {"type": "boolean", "description": "Does it need an answer today?"},
    "topic": {"type": "enum", "choices": ["billing", "cards", "accounts", "other"], "description": "The topic"},
    "tags": {"type": "multi", "choices": ["fraud", "fee", "travel"], "description": "Tags that apply"}}}
TICKETS = ["My card was charged twice for the same coffee.", "I lost my card abroad, block it!"]


@pytest.fixture(scope="module")
def eng():
    e = tiny_engine(seed=5)
    assert e.runner.set_invariant(True)
    e.runner.prefix_cache.set_limit(1 << 30)
    return e


def _pass(eng, graphed: bool, prompt: list[int], rows: int):
    """A scoring pass shaped like a decision's: ``prompt`` (causal), then ``rows`` tree tokens that see the whole
    prompt and the row before; the prompt's first 32 tokens come from the prefix cache."""
    r = eng.runner
    r.prefix_cache.clear()
    r.score_graphs.enabled = False
    r.score(prompt[:32], None, list(range(32)), torch.ones(32, 32).tril().bool(), [31], keep=32)  # stored
    r.score_graphs.enabled = graphed
    P, n = len(prompt), len(prompt) + rows
    ids = prompt + [7 + i for i in range(rows)]
    allow = torch.zeros(n, n, dtype=torch.bool)
    allow[:, :P] = torch.ones(n, P).tril()
    for i in range(P, n):
        allow[i, max(P, i - 1):i + 1] = True
    read = [P - 1, *range(P, n)]
    before = r.score_graphs.passes
    logits, cache = r.score(ids, None, list(range(P)) + [P + (i % 3) for i in range(rows)], allow, read, keep=P)
    assert (r.score_graphs.passes - before) == int(graphed)
    kv = torch.stack([torch.stack((lay.keys[0], lay.values[0])) for lay in cache.layers])
    with r._scoring():  # the invariant tree of the cache
        stored = r.prefix_cache.match(prompt).kv()  # the prompt's blocks the pass stored
    assert stored.shape[3] == P - P % 16
    return logits, torch.cat([kv, stored], 3)


@pytest.mark.parametrize("fused", [True, False])  # fused q/k/v + gate/up GEMMs, or the model's own layer modules
@pytest.mark.parametrize("prompt_len,rows", [(40, 5), (45, 30), (50, 100), (60, 270)])  # buckets 16, 64, 128, 320
def test_graphed_pass_equals_the_eager_pass_bit_for_bit(eng, prompt_len, rows, fused):
    prompt = [(37 * i + 11) % 500 + 3 for i in range(prompt_len)]
    g = eng.runner.score_graphs
    assert g.weights is not None  # the tiny Llama takes the fused layer code
    ref_logits, ref_kv = _pass(eng, False, prompt, rows)
    assert g.use_fused(fused) == fused
    try:
        logits, kv = _pass(eng, True, prompt, rows)
    finally:
        g.use_fused(True)
    assert logits.shape == ref_logits.shape == (rows + 1, ref_logits.shape[-1])
    assert kv.shape == ref_kv.shape and kv.shape[3] == prompt_len + prompt_len - prompt_len % 16  # + stored blocks
    assert torch.equal(logits, ref_logits)
    assert torch.equal(kv, ref_kv)
    assert score_graph.bucket_of(prompt_len - 32 + rows) > prompt_len - 32 + rows  # padding was exercised


def test_later_decision_through_the_graph_gives_the_same_probabilities(eng):
    r = eng.runner
    out = {}
    for graphed in (False, True):
        r.prefix_cache.clear()
        r.score_graphs.enabled = graphed
        decide(SCHEMA, TICKETS[0], engine=eng, prior="none", packing="fused")
        before = r.score_graphs.passes
        d = decide(SCHEMA, TICKETS[1], engine=eng, prior="none", packing="fused")
        assert d.usage["cached_prompt_tokens"] > 0
        assert (r.score_graphs.passes > before) == graphed
        out[graphed] = d
    r.score_graphs.enabled = False
    assert out[True].value_dict() == out[False].value_dict()
    for f in SCHEMA["fields"]:
        assert out[True].fields[f].probabilities == out[False].fields[f].probabilities


def test_too_long_a_pass_stays_eager(eng):
    g = eng.runner.score_graphs
    assert g.fits(900, score_graph.BUCKETS[-1]) == g.enabled
    assert not g.fits(10, score_graph.BUCKETS[-1] + 1)
    assert not g.fits(g.max_len, 1)


def test_buckets_above_256_step_by_64():
    assert [score_graph.bucket_of(n) for n in (1, 16, 17, 256, 257, 282, 320, 321, 400, 512)] == \
        [16, 16, 32, 256, 320, 320, 320, 384, 448, 512]
    assert list(score_graph.BUCKETS) == sorted(set(score_graph.BUCKETS)) and len(score_graph.BUCKETS) <= 9


def test_fuse_again_gives_views_of_the_same_tensors_and_keeps_the_prefix_cache():
    from typedlm.runner.layers import fuse

    e = tiny_engine(seed=6)
    r = e.runner
    layer = r.score_graphs.layers[0]
    a = layer.self_attn
    first = r.score_graphs.weights[0]
    assert torch.equal(first[1], torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
    assert a.k_proj.weight.data_ptr() == first[1][a.q_proj.weight.shape[0]:].data_ptr()  # modules read the fused one
    again = fuse(layer)
    assert all((x is None and y is None) or x.data_ptr() == y.data_ptr() and x.shape == y.shape
               for x, y in zip(first, again))
    r.prefix_cache.set_limit(1 << 30)
    ids = list(range(3, 40))
    r.prefill_prefix(ids)
    r.decode_cache(2)  # the static KV fuses the layers too: nothing moves, the cached prefix stays
    assert r.prefix_cache.match(ids).length == 32
