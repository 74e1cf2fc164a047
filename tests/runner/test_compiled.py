"""The decode step's and short prefill's layer functions compile once for every bucket (one more for one row), with
static shapes except the bucket dims, and the compiled steps give the eager steps' logits. Dynamo's ``eager`` backend: the graph count is dynamo's (guards and
recompiles), the same under inductor on CUDA, without the CPU compiler's minutes."""

import pytest
import torch
from torch._dynamo.utils import counters

from typedlm.runner.compiled import compiled_layer
from typedlm.runner.layers import DECODE_DIMS, decode_layer
from typedlm.runner.short_prefill import DIMS, extend_layer


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]


def test_one_graph_for_every_bucket(tiny):
    kv = tiny.runner.decode_cache(32)  # 32 slots: the first bucket equals the slot count
    fw = tiny.runner.forwards(kv)
    torch.manual_seed(0)
    kv.store.normal_()

    def step(b, cols):
        fw._io[0, :b] = torch.arange(7, 7 + b)
        fw._io[1, :b] = torch.arange(b) + 3
        return fw._decode(b, cols)

    with torch.inference_mode():
        eager = {b: step(b, 64) for b in (32, 4, 1)}
        torch._dynamo.reset()
        counters.clear()
        fw._layer = compiled_layer(decode_layer, DECODE_DIMS, backend="eager")
        for b in (32, 4, 2):  # 4: the tiny model's q heads
            for cols in (128, 64):
                step(b, cols)
        assert _graphs() == 1  # every bucket of 2+ rows, every column bucket
        step(1, 64)
        assert _graphs() == 2  # one row: torch specializes size 1
        for b, want in eager.items():
            assert torch.equal(step(b, 64), want)
        short = fw.short
        short._layer = compiled_layer(extend_layer, DIMS, backend="eager")
        for t in (128, 16):  # 128 tokens: the tiny model's q/k/v rows
            short._reset(t)
            short._run(t, 256)
        assert _graphs() == 3
    torch._dynamo.reset()


def test_the_compile_cache_dir_and_threads_reach_inductor(tmp_path, monkeypatch):
    """``compile_cache_dir`` (default ``<cache>/inductor``) is where inductor then keeps its kernels; ``compile_threads``
    its worker count."""
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    from typedlm import config
    from typedlm.runner.compiled import set_compile_threads

    monkeypatch.setenv(config.INDUCTOR_CACHE_ENV, "/nonexistent-before")
    monkeypatch.setattr(inductor_config, "compile_threads", inductor_config.compile_threads)
    s = config.resolve({"cache": tmp_path}, env={})
    assert s.inductor_dir == tmp_path / "inductor"
    config.export_compile_settings(s.replace(compile_cache_dir=tmp_path / "kernels"))
    set_compile_threads(1)
    assert cache_dir() == str(tmp_path / "kernels") and (tmp_path / "kernels").is_dir()
    assert inductor_config.compile_threads == 1
    with pytest.raises(config.ConfigError, match="TYPEDLM_COMPILE_THREADS='0'"):
        config.resolve(env={"TYPEDLM_COMPILE_THREADS": "0"})


def test_release_workers_shuts_the_pools_down(monkeypatch):
    from torch._inductor import async_compile

    from typedlm.runner.compiled import release_workers

    class Pool:
        down = False

        def shutdown(self):
            self.down = True

    pool = Pool()
    monkeypatch.setattr(async_compile, "_pool_set", [pool])
    assert not release_workers(False) and not pool.down  # the setting off: kept
    assert release_workers(True) and pool.down
    monkeypatch.setattr(async_compile, "_pool_set", [])
    assert not release_workers(True)  # nothing to release
