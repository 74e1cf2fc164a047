"""The runner contract (``typedlm/runner/contract.py``, docs/ARCHITECTURE.md "Runner"), statement by statement,
for every implementation: the torch runner on its static slots, the torch runner on its dynamic cache, and the
MLX runner (mlx[cpu]), all on the same tiny fp32 random model."""

import dataclasses

import pytest
import torch

from typedlm.runner.contract import Capabilities, Forwards, Runner, SlotBook
from typedlm.runner.static_forwards import StaticForwards
from typedlm.runner.static_kv import StaticKV

KINDS = ["static", "dynamic", "mlx"]
PROMPTS = [[1, 2, 3, 4, 5], [7, 8], [9, 10, 11]]


@pytest.fixture(scope="module")
def mlx_engine(tiny_dir):
    pytest.importorskip("mlx_lm")
    from typedlm.engine import load_engine

    return load_engine(str(tiny_dir), backend="mlx", progress=False)


@pytest.fixture(params=KINDS)
def impl(request, tiny):
    """(runner, a fresh decode book of 4 slots, logits -> float32 torch, a one-slot book of the same kind)."""
    if request.param == "mlx":
        from typedlm.runner.mlx_kv import to_torch

        r = request.getfixturevalue("mlx_engine").runner
        return r, r.decode_cache(4), to_torch, lambda: r.decode_cache(1)
    r, dynamic = tiny.runner, request.param == "dynamic"
    kv = r.decode_cache(4, dynamic=dynamic)
    return r, kv, lambda x: x.float(), (lambda: r.decode_cache(1, dynamic=True)) if dynamic else (lambda: kv)


def _alone(runner, book, ids, host):
    """Logits after ``ids`` fed to one slot of a book of the same kind (prefill of all but the last, one step)."""
    kv = book()
    s = kv.acquire()
    runner.prefill(kv, [ids[:-1]], [s])
    out = host(runner.run(kv, [[ids[-1]]], [s]))[0]
    kv.release(s)
    return out


def test_1_capabilities_are_a_declared_frozen_object(impl):
    runner, kv, _, _ = impl
    caps = runner.capabilities
    assert isinstance(caps, Capabilities) and caps.backend == runner.backend
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.invariant = not caps.invariant
    assert caps.prefix_cache == (runner.prefix_cache is not None and runner.prefix_cache.enabled)
    assert caps.device_feed == runner.decode_cache(1).device_feed and (caps.device_feed or not kv.device_feed)
    assert isinstance(runner, Runner)


def test_1_capabilities_are_read_not_rebuilt_and_follow_the_switches(impl):
    """Read per decision (decide/score.py, ties.py): the same object until a run-time switch changes it."""
    runner, _, _, _ = impl
    caps = runner.capabilities
    assert runner.capabilities is caps
    cache = runner.prefix_cache
    if cache is None:
        return
    limit = cache.limit_bytes
    try:
        cache.set_limit(0)
        off = runner.capabilities
        assert off.prefix_cache is False and off.invariant == caps.invariant and runner.capabilities is off
        cache.set_limit(limit or 1 << 20)
        assert runner.capabilities.prefix_cache is True
        before = runner.capabilities.invariant
        runner.set_invariant(not before)
        assert runner.capabilities.invariant == runner.invariant
        runner.set_invariant(before)
        assert runner.capabilities.invariant == before
    finally:
        cache.set_limit(limit)


def test_2_books_apart_from_forwards(impl):
    runner, kv, _, _ = impl
    assert isinstance(kv, SlotBook) and isinstance(runner.forwards(kv), Forwards)
    if isinstance(kv, StaticKV):  # the static slots keep books only; their forwards are their own object
        assert isinstance(runner.forwards(kv), StaticForwards) and runner.forwards(kv) is not kv
        assert not any(hasattr(kv, m) for m in ("prefill", "step", "extend", "capture", "model"))


def test_3_rows_are_slots(impl):
    runner, kv, _, _ = impl
    slots = [kv.acquire() for _ in range(3)]
    assert sorted(slots) == [0, 1, 2] and kv.size == 3 and kv.size + kv.free_slots == kv.capacity
    kv.release(slots[1])
    assert kv.size == 2 and kv.free_slots == kv.capacity - 2
    kv.release(slots[1])  # a second release is a no-op
    assert kv.size == 2
    for s in (slots[0], slots[2]):
        kv.release(s)
    assert kv.size == 0 and kv.free_slots == kv.capacity


def test_4_shapes_and_5_lengths_match_a_single_row_run(impl):
    runner, kv, host, book = impl
    V = _vocab(runner)
    slots = [kv.acquire() for _ in PROMPTS]
    last = [host(runner.prefill(kv, [p], [s])) for p, s in zip(PROMPTS, slots)]
    assert all(x.shape == (1, V) and x.dtype == torch.float32 for x in last)
    one = book()  # read: a row's KV is what a single-row prefill of its tokens holds
    s1 = one.acquire()
    runner.prefill(one, [PROMPTS[2]], [s1])
    got, ref = kv.read(slots[2], 0, 3), one.read(s1, 0, 3)
    one.release(s1)
    assert got.shape == ref.shape and got.shape[:2] == (len(got), 2) and got.shape[3] == 3
    assert torch.allclose(got.float(), ref.float(), atol=1e-5)
    feeds = [[20, 21, 22], [23], [24, 25]]
    every = host(runner.run(kv, feeds, slots, every=True))
    assert every.shape == (3, 3, V)
    rows = [p + f for p, f in zip(PROMPTS, feeds)]
    out = host(runner.run(kv, [[30], [31], [32]], slots))
    assert out.shape == (3, V)
    for i, r in enumerate(rows):
        ref = _alone(runner, book, r + [30 + i], host)
        assert torch.allclose(out[i], ref, atol=1e-4), i
        assert int(out[i].argmax()) == int(ref.argmax())
    # truncate forgets a row's last tokens; feeding them again gives the same logits
    kv.truncate([2, 0, 2], slots)
    again = host(runner.run(kv, [[22, 30], [40], [25, 32]], slots, every=False))
    assert torch.allclose(again[0], out[0], atol=1e-4) and torch.allclose(again[2], out[2], atol=1e-4)
    for s in slots:
        kv.release(s)


def _vocab(runner) -> int:
    return runner.vocab if runner.backend == "mlx" else int(runner.model.get_output_embeddings().weight.shape[0])


def test_6_scoring_is_repeatable_and_cuts_the_prefix_back(impl):
    runner, _, host, _ = impl
    ids = [5, 6, 7, 8, 9, 10]
    prefix = runner.prefill_prefix(ids)
    rows = [3, 4, 5]
    allow = torch.ones(len(ids) + len(rows), len(ids) + len(rows), dtype=torch.bool).tril()
    a, prefix = runner.score(rows, prefix, list(range(6, 9)), allow[6:], [0, 2])
    b, prefix = runner.score(rows, prefix, list(range(6, 9)), allow[6:], [0, 2])
    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)  # scoring logits: torch on every backend
    assert a.shape == (2, _vocab(runner)) and torch.equal(a, b)
    assert isinstance(runner.cached_prefix(ids), int) and runner.cached_prefix(ids) >= 0
    if not runner.capabilities.prefix_cache:
        assert runner.cached_prefix(ids) == 0


def test_7_deterministic_mode_follows_the_capabilities(impl):
    runner, _, _, _ = impl
    if not runner.capabilities.deterministic:
        assert runner.set_deterministic(True) is False and not runner.capabilities.invariant
        return
    before = runner.capabilities.invariant
    try:
        assert runner.set_deterministic(True) is True and runner.capabilities.invariant
        assert runner.set_deterministic(False) is False
    finally:
        runner.set_invariant(before)
