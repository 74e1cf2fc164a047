"""Branch-point trie over the candidate token sequences of one question.

Only nodes with two or more children (branch points) carry information: a node with one child is
forced, exactly as a grammar-constrained decoder would force it. So a question needs the logits at
its branch points only, and the rows that reach them are the shortest paths covering every branch
point (one row when the candidates diverge at a single place).

Per branch point b with allowed children C(b) and full-vocabulary log-probabilities ℓ:
  local(c) = ℓ[c] - logsumexp(ℓ[C(b)])        (constrained, renormalized at b)
A candidate's constrained-path log-probability is the sum of ``local`` over the branch points on its
path; these form a proper distribution over candidates (the token sequences are prefix-free). The
question's legal mass is logsumexp over candidates of the sum of ℓ (unrenormalized) along the path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BranchPoint:
    depth: int  # tokens consumed from the question's start (after the cue) before this choice
    children: tuple[int, ...]  # allowed next token ids, sorted
    # for every candidate: index into ``children`` of the child its path takes, or -1 (not through here)
    take: tuple[int, ...]


@dataclass(frozen=True)
class Trie:
    points: tuple[BranchPoint, ...]
    paths: tuple[tuple[int, ...], ...]  # candidate token sequences
    # rows: (path tokens to feed after the cue, ((point index, logit position within the path feed), ...))
    rows: tuple[tuple[tuple[int, ...], tuple[tuple[int, int], ...]], ...]


def build_trie(paths: list[tuple[int, ...]]) -> Trie:
    """Trie of prefix-free token sequences -> branch points and the rows that reach them."""
    n = len(paths)
    for i in range(n):
        for j in range(n):
            if i != j and paths[j][: len(paths[i])] == paths[i]:
                raise ValueError(f"candidate token paths are not prefix-free ({i} is a prefix of {j})")
    points: list[BranchPoint] = []
    prefixes: list[tuple[int, ...]] = []

    def walk(prefix: tuple[int, ...], members: list[int]) -> None:
        d = len(prefix)
        children = sorted({paths[m][d] for m in members})
        if len(children) > 1:
            take = [-1] * n
            for m in members:
                take[m] = children.index(paths[m][d])
            points.append(BranchPoint(d, tuple(children), tuple(take)))
            prefixes.append(prefix)
        for c in children:
            sub = [m for m in members if paths[m][d] == c]
            if any(len(paths[m]) > d + 1 for m in sub):
                walk(prefix + (c,), sub)

    walk((), list(range(n)))
    # rows: deepest branch points first; each point is read from the first row whose feed covers it
    order = sorted(range(len(points)), key=lambda i: -len(prefixes[i]))
    covered: set[int] = set()
    rows = []
    for i in order:
        if i in covered:
            continue
        feed = prefixes[i]
        reads = []
        for j, pj in enumerate(prefixes):
            if j not in covered and feed[: len(pj)] == pj:
                covered.add(j)
                reads.append((j, len(pj)))  # logits after the cue + len(pj) tokens of the feed
        rows.append((feed, tuple(sorted(reads))))
    return Trie(tuple(points), tuple(tuple(p) for p in paths), tuple(rows))


def score_trie(trie: Trie, child_logprobs: list[torch.Tensor]) -> tuple[list[float], list[float], float]:
    """From each branch point's full-vocabulary log-probabilities of its allowed children (1-D, in
    ``children`` order) -> (constrained log-probability per candidate, unrenormalized path
    log-probability per candidate, log legal mass).

    float64 throughout; the sums run on Python floats (the same IEEE double adds, in the same order, as
    float64 tensor elements), only the normalizers are torch's ``logsumexp``: a later decision scores ~30 tries
    after its one device sync, and per-element tensor ops cost the host ~3 ms there."""
    n = len(trie.paths)
    local = [0.0] * n
    full = [0.0] * n
    for bp, child in zip(trie.points, child_logprobs):
        child = child.double()
        norm = float(torch.logsumexp(child, 0))
        vals = child.tolist()
        for m, k in enumerate(bp.take):
            if k >= 0:
                local[m] += vals[k] - norm
                full[m] += vals[k]
    return local, full, float(torch.logsumexp(torch.tensor(full, dtype=torch.float64), 0))
