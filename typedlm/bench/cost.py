"""The work a forward does, from a model's config: FLOPs and bytes moved, and the device peaks they are set against
(``typedlm bench roofline``).

FLOPs are the useful ones: ``2 x`` the matmul weights a token passes through (q/k/v, o, gate/up/down of every
layer; the lm_head only for the rows whose logits are read) ``x`` tokens, plus attention's ``4 x layers x heads x
head_dim`` per (query, key) pair it attends (QK^T and AV). Norms, RoPE, softmax and embeddings are left out (well
under 1 % of a 7B forward). Bytes are the matmul weights read once per forward plus the K/V read and written.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# dense bf16/fp16 tensor-core FLOP/s and memory bandwidth (bytes/s) of a device, by a part of its name (first
# match wins: the more specific names first); vendors' data sheets (SXM parts)
PEAKS: tuple[tuple[str, float, float], ...] = (
    ("H200", 989e12, 4.8e12),
    ("H100", 989e12, 3.35e12),
    ("A100", 312e12, 2.039e12),
)
HALF = (torch.bfloat16, torch.float16)  # the dtypes the table's FLOP/s hold for


@dataclass(frozen=True)
class Shape:
    """What the cost of a forward depends on, read from a Llama/Qwen-style config."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    lm_rows: int  # the lm_head's rows (the padded vocabulary)
    dtype_bytes: int

    @classmethod
    def of(cls, config, lm_rows: int, dtype: torch.dtype) -> "Shape":
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(layers=config.num_hidden_layers, hidden=config.hidden_size, heads=heads,
                   kv_heads=config.num_key_value_heads, head_dim=head_dim, intermediate=config.intermediate_size,
                   lm_rows=lm_rows, dtype_bytes=torch.finfo(dtype).bits // 8)

    @property
    def layer_params(self) -> int:
        """Matmul weights of one decoder layer: q, k, v, o and the gated MLP's three."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return self.hidden * (q + 2 * kv) + q * self.hidden + 3 * self.hidden * self.intermediate

    @property
    def lm_params(self) -> int:
        return self.hidden * self.lm_rows

    @property
    def weight_bytes(self) -> int:
        """Bytes of the matmul weights one forward reads (every layer and the lm_head)."""
        return (self.layers * self.layer_params + self.lm_params) * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    def flops(self, tokens: int, logit_rows: int, keys: int) -> int:
        """FLOPs of ``tokens`` through every layer, the lm_head on ``logit_rows`` of them, and attention over
        ``keys`` (query, key) pairs in all."""
        return 2 * (self.layers * self.layer_params * tokens + self.lm_params * logit_rows) \
            + 4 * self.layers * self.heads * self.head_dim * keys

    def bytes(self, forwards: int, kv_read: int, kv_written: int) -> int:
        """Bytes of ``forwards`` weight reads, ``kv_read`` tokens' K/V read and ``kv_written`` tokens' written."""
        return forwards * self.weight_bytes + (kv_read + kv_written) * self.kv_bytes_per_token


def causal_keys(start: int, n: int) -> int:
    """(query, key) pairs of ``n`` new tokens after ``start`` earlier ones, each seeing those and itself."""
    return n * start + n * (n + 1) // 2


def peaks(device_name: str, dtype: torch.dtype) -> tuple[float, float] | None:
    """(FLOP/s, bytes/s) of the device for ``dtype``, or None (a CPU, an unlisted device, a dtype the table
    does not hold)."""
    if dtype not in HALF:
        return None
    for part, flops, bandwidth in PEAKS:
        if part in device_name:
            return flops, bandwidth
    return None


def rates(flops: int, nbytes: int, seconds: float, peak: tuple[float, float] | None) -> dict:
    """Achieved TFLOPS and GB/s over ``seconds``, and each as a fraction of ``peak`` (None: not known)."""
    tflops, gbs = flops / seconds / 1e12, nbytes / seconds / 1e9
    return {"tflops": tflops, "gb_s": gbs,
            "tflops_fraction": None if peak is None else tflops * 1e12 / peak[0],
            "gb_s_fraction": None if peak is None else gbs * 1e9 / peak[1]}
