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


@dataclass(frozen=True)
class Layout:
    """The branch points of several tries (a plan's questions) in one flat order, for scoring many contexts at
    once: point ``g`` is trie ``t``'s point ``p`` in trie order; candidates flattened the same way."""
    points: tuple[tuple[int, int], ...]  # (trie, point) per flat point
    offsets: tuple[int, ...]  # per trie: its first flat point
    children: torch.Tensor  # [points, width] long: each point's allowed ids, padded with 0
    widths: tuple[tuple[int, torch.Tensor], ...]  # (children count w, flat points with w children)
    steps: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...]  # step s: (candidate, point, child)
    candidates: tuple[tuple[int, int], ...]  # per trie: (first flat candidate, count)
    sizes: tuple[tuple[int, torch.Tensor], ...]  # (candidate count c, tries with c candidates)


def layout(tries: list[Trie]) -> Layout:
    """Flat index tables of ``tries``: step ``s`` holds every candidate's ``s``-th branch point on its path."""
    points, kids, steps, cands, offsets = [], [], [], [], []
    for t, trie in enumerate(tries):
        first, c0 = len(points), sum(n for _, n in cands)
        offsets.append(first)
        points += [(t, p) for p in range(len(trie.points))]
        kids += [bp.children for bp in trie.points]
        for m in range(len(trie.paths)):
            on_path = [(first + b, bp.take[m]) for b, bp in enumerate(trie.points) if bp.take[m] >= 0]
            for s, (g, k) in enumerate(on_path):
                if s == len(steps):
                    steps.append([])
                steps[s].append((c0 + m, g, k))
        cands.append((c0, len(trie.paths)))
    width = max((len(k) for k in kids), default=1)
    children = torch.tensor([list(k) + [0] * (width - len(k)) for k in kids], dtype=torch.long).reshape(-1, width)

    def groups(sizes: list[int]) -> tuple:
        return tuple((w, torch.tensor([i for i, x in enumerate(sizes) if x == w])) for w in sorted(set(sizes)))

    return Layout(tuple(points), tuple(offsets), children, groups([len(k) for k in kids]),
                  tuple(tuple(torch.tensor(col) for col in zip(*step)) for step in steps), tuple(cands),
                  groups([n for _, n in cands]))


def score_tries(lay: Layout, child_logprobs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``child_logprobs`` [contexts, points, width]: each flat point's full-vocabulary log-probabilities of its
    allowed children (``Layout.children`` order; padding ignored) -> float64 (constrained log-probability per
    flat candidate [contexts, candidates], unrenormalized path log-probability per flat candidate, log legal
    mass per trie [contexts, tries]). Each candidate's sums run over its branch points in trie order, and each
    logsumexp over one row of exactly the allowed values, as :func:`score_trie` does for one context."""
    x = child_logprobs.double()
    n = x.shape[0]
    norm = torch.empty(n, len(lay.points), dtype=torch.float64)
    for w, pts in lay.widths:
        norm[:, pts] = torch.logsumexp(x[:, pts, :w], 2)
    total = sum(c for _, c in lay.candidates)
    local = torch.zeros(n, total, dtype=torch.float64)
    full = torch.zeros(n, total, dtype=torch.float64)
    for cand, pts, kid in lay.steps:
        picked = x[:, pts, kid]
        local[:, cand] += picked - norm[:, pts]
        full[:, cand] += picked
    mass = torch.empty(n, len(lay.candidates), dtype=torch.float64)
    first = torch.tensor([c0 for c0, _ in lay.candidates], dtype=torch.long)
    for c, tries in lay.sizes:
        mass[:, tries] = torch.logsumexp(full[:, first[tries, None] + torch.arange(c)], 2)
    return local, full, mass


def score_trie(trie: Trie, child_logprobs: list[torch.Tensor]) -> tuple[list[float], list[float], float]:
    """One trie on one context: each branch point's full-vocabulary log-probabilities of its allowed children
    (1-D, in ``children`` order) -> (constrained log-probability per candidate, unrenormalized path
    log-probability per candidate, log legal mass)."""
    lay = layout([trie])
    x = torch.zeros(1, len(trie.points), lay.children.shape[1], dtype=torch.float64)
    for b, child in enumerate(child_logprobs):
        x[0, b, : len(child)] = child.double()
    local, full, mass = score_tries(lay, x)
    return local[0].tolist(), full[0].tolist(), float(mass[0, 0])
