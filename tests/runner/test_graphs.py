"""The CUDA-graph buckets: a step of ``n`` rows and ``L`` columns replays the graph of (``bucket(n)``, its column
bucket), and warm-up's ``capture`` up to ``top`` columns records every bucket such a step can meet."""

from typedlm.runner.graphs import MIN_BUCKET, batch_buckets, bucket, column_buckets


def _cols(length: int, max_len: int) -> int:  # the column bucket of a step (StaticForwards.step)
    return min(max(MIN_BUCKET, bucket(length, 1 << 30)), max_len)


def test_buckets():
    assert [bucket(n, 32) for n in (1, 2, 3, 5, 17, 32, 40)] == [1, 2, 4, 8, 32, 32, 32]
    assert batch_buckets(32) == [1, 2, 4, 8, 16, 32] and batch_buckets(24) == [1, 2, 4, 8, 16, 24]
    assert batch_buckets(1) == [1]
    assert column_buckets(525, 4096) == [256, 512, 1024] and column_buckets(100, 4096) == [256]
    assert column_buckets(4096, 4096) == [256, 512, 1024, 2048, 4096] and column_buckets(200, 200) == [200]


def test_warm_up_covers_every_step_it_is_asked_for():
    for capacity in (1, 3, 24, 32):
        for n in range(1, capacity + 1):
            assert bucket(n, capacity) in batch_buckets(capacity)
    for max_len in (200, 4096):
        for top in (1, 255, 256, 257, 525, 1024, 3000, 4096):
            captured = set(column_buckets(min(top, max_len), max_len))
            assert all(_cols(length, max_len) in captured for length in range(1, min(top, max_len) + 1))
