"""The decode step's and short prefill's layer functions compile once for every bucket (one more for one row), and
the compiled steps give the eager steps' logits. Dynamo's ``eager`` backend: the graph count is dynamo's (guards and
recompiles), the same under inductor on CUDA, without the CPU compiler's minutes."""

import torch
from torch._dynamo.utils import counters

from typedlm.runner.compiled import compiled_layer
from typedlm.runner.layers import decode_layer
from typedlm.runner.short_prefill import extend_layer


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
        fw._layer = compiled_layer(decode_layer, backend="eager")
        for b in (32, 4, 2):  # 4: the tiny model's q heads
            for cols in (128, 64):
                step(b, cols)
        assert _graphs() == 1  # every bucket of 2+ rows, every column bucket
        step(1, 64)
        assert _graphs() == 2  # one row: torch specializes size 1
        for b, want in eager.items():
            assert torch.equal(step(b, 64), want)
        short = fw.short
        short._layer = compiled_layer(extend_layer, backend="eager")
        for t in (128, 16):  # 128 tokens: the tiny model's q/k/v rows
            short._reset(t)
            short._run(t, 256)
        assert _graphs() == 3
    torch._dynamo.reset()
