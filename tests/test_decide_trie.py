"""``trie.score_tries`` (every question of every context in a few tensor ops) gives the same float64 bits as
scoring one trie on one context point by point (the loop below: what ``score_trie`` computed before), across
trie shapes and context counts."""

import random

import pytest
import torch

from typedlm.decide.trie import build_trie, layout, score_tries


def _one_trie(trie, child_logprobs):
    """The reference: per branch point, logsumexp over its children, then each candidate's sums in point order."""
    n = len(trie.paths)
    local = torch.zeros(n, dtype=torch.float64)
    full = torch.zeros(n, dtype=torch.float64)
    for bp, child in zip(trie.points, child_logprobs):
        child = child.double()
        norm = torch.logsumexp(child, 0)
        for m, k in enumerate(bp.take):
            if k >= 0:
                local[m] += child[k] - norm
                full[m] += child[k]
    return local.tolist(), full.tolist(), float(torch.logsumexp(full, 0))


def _random_tries(rng):
    tries = []
    for _ in range(rng.randint(1, 8)):
        n = rng.randint(1, 40)
        paths = set()
        while len(paths) < n:  # an end token (99) no path holds elsewhere: prefix-free
            paths.add(tuple(rng.randint(0, 9) for _ in range(rng.randint(0, 4))) + (99,))
        tries.append(build_trie(sorted(paths)))
    return tries


@pytest.mark.parametrize("seed", range(40))
def test_score_tries_equals_one_trie_at_a_time_bitwise(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    tries = _random_tries(rng)
    lay = layout(tries)
    contexts = [1, 2, 7, 64][seed % 4]
    x = torch.randn(contexts, len(lay.points), lay.children.shape[1]) * 4 - 5  # float32, like the device's
    local, full, mass = score_tries(lay, x)
    for c in range(contexts):
        for t, trie in enumerate(tries):
            g, (c0, n) = lay.offsets[t], lay.candidates[t]
            ref = _one_trie(trie, [x[c, g + b, : len(bp.children)] for b, bp in enumerate(trie.points)])
            assert (local[c, c0:c0 + n].tolist(), full[c, c0:c0 + n].tolist(), float(mass[c, t])) == ref

