"""Qwen3-MoE's sparse MLP on MLX: the numpy reference's contract (numpy/moe.py), with the experts stacked.

Each projection holds every expert's matrix in one array, ``[E, out, in]`` (or MLX's quantized parts of it), and
``mx.gather_mm`` / ``mx.gather_qmm`` multiply each token by the k matrices its router chose, as mlx-lm's
``SwitchGLU`` does: no loop over experts, nothing dequantized. The router is ranked as the reference ranks it
(largest probability first); ties, which the reference breaks by the lower index, are left to ``mx.argsort``.
"""

from collections.abc import Callable
from typing import Any

import mlx.core as mx
import numpy as np

from fs_weights import Checkpoint


class SwitchLinear:
    """``x @ W[e]ᵀ`` for each token's chosen experts ``e``: x [..., 1, 1, in], ids [..., k] -> [..., k, 1, out]."""

    def __init__(self, w: mx.array, scales: mx.array | None, biases: mx.array | None, bits: int, group_size: int):
        self.w, self.scales, self.biases, self.bits, self.group_size = w, scales, biases, bits, group_size

    def __call__(self, x: mx.array, ids: mx.array) -> mx.array:
        if self.scales is None:
            return mx.gather_mm(x, self.w.swapaxes(-1, -2), rhs_indices=ids)
        return mx.gather_qmm(
            x, self.w, self.scales, self.biases, rhs_indices=ids, transpose=True, group_size=self.group_size,
            bits=self.bits,
        )  # fmt: skip


def stacked(
    ckpt: Checkpoint, prefix: str, experts: int, name: str, dt: mx.Dtype, part: Callable[[str], np.ndarray]
) -> SwitchLinear:
    """Projection ``name`` (gate_proj, up_proj, down_proj) of every expert under ``prefix`` ("model.layers.{i}.mlp."),
    stacked [E, ...]; quantized experts keep their codes, scales and biases (in ``dt``, as the dense layers').
    ``part(tensor name)``: the stored tensor, or this rank's slice of it under tensor parallelism."""
    names = [f"{prefix}experts.{e}.{name}" for e in range(experts)]
    first = names[0] + ".weight"

    def stack(kind: str, cast: bool) -> mx.array:
        arr = np.stack([np.asarray(part(f"{n}.{kind}")) for n in names])
        a = mx.array(arr)
        if ckpt.info(f"{names[0]}.{kind}").dtype == "BF16":
            a = a.view(mx.bfloat16)
        return a.astype(dt) if cast else a

    if not ckpt.is_quantized(first):
        return SwitchLinear(stack("weight", True), None, None, 0, 0)
    bits, group = ckpt.quant_params(first)
    return SwitchLinear(stack("weight", False), stack("scales", True), stack("biases", True), bits, group)


class SparseMoE:
    def __init__(self, router: Any, gate: SwitchLinear, up: SwitchLinear, down: SwitchLinear, k: int, normalize: bool):
        self.router, self.gate, self.up, self.down, self.k, self.normalize = router, gate, up, down, k, normalize
        self.group: Any = None  # tensor parallelism: each rank holds 1/N of every expert's width (shard.py)

    def __call__(self, x: mx.array) -> mx.array:
        p = mx.softmax(self.router(x).astype(mx.float32), axis=-1, precise=True)
        ids = mx.argsort(-p, axis=-1)[..., : self.k]
        w = mx.take_along_axis(p, ids, axis=-1)
        if self.normalize:
            w = w / w.sum(axis=-1, keepdims=True)
        xe = mx.expand_dims(x, (-2, -3))  # [..., 1, 1, H]
        g, u = self.gate(xe, ids), self.up(xe, ids)  # [..., k, 1, M]
        y = self.down((g * mx.sigmoid(g)) * u, ids).squeeze(-2)  # [..., k, H]
        y = (y * w[..., None].astype(y.dtype)).sum(axis=-2)
        return y if self.group is None else mx.distributed.all_sum(y, group=self.group)
