"""The mixed forward (issue 34, opt-in: ``Settings.mixed_step``): a decode step of the static slots with one
decision chunk (a :class:`~.score_graph.Ride`: a prompt chunk or a pass's chunk on its prefix) riding in the same
forward, so the weights are read once for both (a separate graphed chunk costs a second weight read: ~7 ms beside
a ~5 ms 7B decode step on the H200).

Per layer the decode rows and the chunk's rows are one row block: RMSNorm, the fused q/k/v GEMM, RoPE, o_proj and
the MLP run once over ``b + nb`` rows on the batch-invariant ops; attention is split: the decode rows over their
slots (the deterministic decode layer's attention), the chunk's rows over the score graphs' buffer under the
chunk's allowed-attention matrix (the score graph's attention, the same call). So the chunk's rows get the bits
its score graph gives (a row's invariant GEMM / RMSNorm result does not depend on the other rows; its attention
only on its own ordered keys): a decision beside streams stays bit-identical to alone
(``tests/generate/test_decide_beside_streams.py``). The decode rows take the invariant kernels on a mixed step
(in deterministic mode they are the same bits as a plain step).

On CUDA one graph per ``(batch bucket, (columns, chunk bucket))``, decode rows and chunk attending over the same
column bucket (the larger of the two); captured at the server's warm-up (``capture``) or on first use. On the CPU
the same body runs eagerly.
"""

from __future__ import annotations

import torch

from .graphs import DecodeGraphs
from .invariant import mode as invariant
from .layers import _invariant_attention, out_mlp, qkv_rope
from .score_graph import BUCKETS, Ride, ScoreGraphs, _length

MAX_RIDE = 128  # tokens a riding chunk may have (a step's budget is ~128 tokens)


class MixedStep:
    """Decode steps of ``fw`` (a StaticForwards) with a chunk of ``sg`` (the runner's ScoreGraphs) riding."""

    def __init__(self, fw, sg: ScoreGraphs):
        self.fw, self.sg = fw, sg
        self.graphs = DecodeGraphs(fw.dev, self._run, self._reset, fw._io, capture_mode="thread_local")
        self.steps = 0  # steps that carried a chunk (tests, benches)

    def fits(self, ride: Ride) -> bool:
        return len(ride.ids) <= MAX_RIDE and self.sg.weights is not None and \
            self.sg.fits(_length(ride.past), len(ride.ids))

    def step(self, b: int, cols: int, ride: Ride) -> torch.Tensor:
        """The decode rows' inputs are staged in ``fw``'s buffers (``b`` rows, ``cols`` columns); stage the ride's,
        run both -> the decode rows' float32 logits ``[b, V]`` (the graph's output: the caller copies); ``ride.out``
        gets the chunk's (logits, KV)."""
        fw, sg = self.fw, self.sg
        n, m = len(ride.ids), _length(ride.past)
        nb, ccols = sg.shape(n, m)
        key = (max(cols, ccols), nb)
        cuda = fw.dev.type == "cuda"
        with sg._lock, invariant.enabled(True):
            sg._buffer()
            if cuda and (b, key) not in self.graphs.graphs:
                saved = fw._io[:, :b].clone()  # the decode inputs survive the capture's warm-up runs
                self.graphs.get(b, key)
                fw._io[:, :b].copy_(saved)
            sg.stage(ride.past, ride.ids, ride.positions, ride.allow, ride.read, nb, key[0])
            if cuda:
                graph, out = self.graphs.graphs[(b, key)]
                graph.replay()
            else:
                out = self._run(b, key)
            ride.out = sg.finish(out[1], len(ride.read), ride.keep)
            self.steps += 1
            return out[0]

    def capture(self, batches: list[int], cols: list[int]) -> None:
        """Every (batch, columns, chunk bucket up to :data:`MAX_RIDE`) graph now (the server's warm-up)."""
        with self.sg._lock, invariant.enabled(True):
            self.sg._buffer()
            for b in reversed(batches):
                for c in reversed(cols):
                    for nb in (x for x in BUCKETS if x <= MAX_RIDE):
                        self.graphs.get(b, (c, nb))
        torch.cuda.synchronize(self.fw.dev)

    def _reset(self, b: int) -> None:
        self.fw._reset_inputs(b)
        self.sg.reset_all()

    def _run(self, b: int, key: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The body: ``b`` decode rows (``fw``'s inputs) and ``nb`` chunk rows (``sg``'s) -> (decode logits
        ``[b, V]`` float32, the chunk rows' final hidden states ``[nb, hidden]``)."""
        cols, nb = key
        fw, sg = self.fw, self.sg
        base = fw.base
        pos_d, pos_c, col_c = fw._io[1, :b], sg._io[1, :nb], sg._io[2, :nb]
        ids = torch.cat([fw._io[0, :b], sg._io[0, :nb]]).view(1, b + nb)
        h = base.embed_tokens(ids)
        cos, sin = base.rotary_emb(h, torch.cat([pos_d, pos_c]).view(1, b + nb))
        visible = fw._cols[:cols].view(1, 1, 1, cols) <= pos_d.view(b, 1, 1, 1)
        mask = sg._allow[:nb, :cols].view(1, 1, nb, cols)
        rows = fw._rows[:b]
        heads, kvh, hd = fw.heads, fw.kv_heads, fw.head_dim
        for i, w in enumerate(sg.weights):  # the score graph's eps and fused weights (fw's are the same tensors)
            n1, qkv_w, qkv_b, qn, kn, o_w, o_b, n2, gu_w, d_w = w
            layer = sg.layers[i]
            eps, eps2 = layer.input_layernorm.variance_epsilon, layer.post_attention_layernorm.variance_epsilon
            q, k, v = qkv_rope(h, n1, qkv_w, qkv_b, qn, kn, cos, sin, eps, heads, kvh, hd,
                               linear=invariant.linear, norm=invariant.rms_norm)
            kc, vc, buf = fw.k[i], fw.v[i], sg._kv[i]
            kc[rows, :, pos_d] = k[:b]
            vc[rows, :, pos_d] = v[:b]
            od = _invariant_attention(q[:b].view(b, kvh, heads // kvh, hd), kc[:b, :, :cols], vc[:b, :, :cols],
                                      visible, layer.self_attn.scaling)
            buf[0][0, :, col_c] = k[b:].transpose(0, 1)
            buf[1][0, :, col_c] = v[b:].transpose(0, 1)
            oc = invariant.attention(q[b:].transpose(0, 1)[None], buf[0][:, :, :cols], buf[1][:, :, :cols], mask,
                                     layer.self_attn.scaling)
            o = torch.cat([od.reshape(b, heads * hd), oc.reshape(nb, heads * hd)]).view(1, b + nb, heads * hd)
            h = out_mlp(h, o, o_w, o_b, n2, gu_w, d_w, eps2, linear=invariant.linear, norm=invariant.rms_norm)
        hn = base.norm(h)[0]
        return fw.model.lm_head(hn[:b]).float(), hn[b:]
