"""Tensor parallelism on ``mx.distributed``: each rank holds a slice of every projection, mlx-lm's Qwen3 scheme.

q/k/v and gate/up are split by output rows (each rank computes its own heads and its own slice of the MLP's
width); o_proj and down_proj by input columns, each followed by one ``all_sum`` so every rank ends the attention
and the MLP with the whole hidden state. Embedding, norms and lm_head are whole on every rank, so every rank
computes the same logits (the all-sum result is the same bits everywhere) and samples the same token.

A Qwen3-MoE layer splits every expert as a dense MLP is split (gate/up rows, down columns: each rank holds 1/N of
every expert's width, as mlx-lm shards its MoE models' ``switch_mlp``); the router is whole, so every rank picks
the same experts, mixes its partial outputs with the same weights, and one ``all_sum`` ends the layer.

Each rank reads only its slice from the checkpoint (the safetensors mmap is sliced before anything is copied):
rows ``r·out/N ..`` of a row-split weight, columns ``r·in/N ..`` of a column-split one - for a quantized weight
in packed words (``in·bits/32/N``) and in groups for its scales and biases, so ``in/N`` must be a whole number of
quantization groups. Heads and KV heads must divide by N.
"""

from typing import Any

import mlx.core as mx
import numpy as np

from fs_weights import Checkpoint, Qwen3Config

from ..errors import ModelError

SPLIT = {"q_proj": 0, "k_proj": 0, "v_proj": 0, "gate_proj": 0, "up_proj": 0, "o_proj": 1, "down_proj": 1}


def _mlp_widths(c: Qwen3Config) -> list[tuple[str, int]]:
    """The MLP widths the ranks split: the dense layers' and, in Qwen3-MoE, every expert's."""
    sparse = [c.is_sparse(i) for i in range(c.num_hidden_layers)]
    widths = [("intermediate_size", c.intermediate_size)] if not all(sparse) else []
    return widths + ([("moe_intermediate_size", c.moe_intermediate_size)] if any(sparse) else [])


def check_divisible(c: Qwen3Config, N: int, group_size: int | None) -> None:
    heads = [("num_attention_heads", c.num_attention_heads), ("num_key_value_heads", c.num_key_value_heads)]
    for what, n in heads + _mlp_widths(c):
        if n % N:
            raise ModelError(f"tensor parallelism over {N} ranks: {what}={n} does not divide by {N}")
    if group_size:
        for what, n in [("num_attention_heads*head_dim", c.num_attention_heads * c.dim_head), *_mlp_widths(c)]:
            if (n // N) % group_size:
                raise ModelError(
                    f"tensor parallelism over {N} ranks: {what}/{N} = {n // N} inputs per rank is not a whole number "
                    f"of quantization groups of {group_size}"
                )


def split_of(name: str) -> int | None:
    """0 (rows), 1 (columns) or None (whole) for a tensor name like ``model.layers.3.mlp.down_proj.scales``."""
    parts = name.split(".")
    return SPLIT.get(parts[-2]) if len(parts) >= 2 else None


def rank_slice(ckpt: Checkpoint, name: str, rank: int, N: int, raw: np.ndarray | None = None) -> np.ndarray:
    """This rank's part of a stored tensor (raw storage: BF16 as uint16, packed uint32 codes as they are), or of
    ``raw``, the tensor already read another way."""
    raw = ckpt.raw(name) if raw is None else raw
    axis = split_of(name)
    if axis is None or N == 1:
        return np.asarray(raw)
    size = raw.shape[axis]
    if size % N:
        raise ModelError(f"{name}: dimension {axis} of {raw.shape} does not divide by {N} ranks")
    step = size // N
    part = raw[rank * step : (rank + 1) * step] if axis == 0 else raw[:, rank * step : (rank + 1) * step]
    return np.ascontiguousarray(part)


class AllSum:
    """A column-split Linear: its partial product, summed over the group (every rank gets the sum)."""

    def __init__(self, linear: Any, group: Any):
        self.linear, self.group = linear, group

    def __call__(self, x: mx.array) -> mx.array:
        return mx.distributed.all_sum(self.linear(x), group=self.group)


def shard_model(model: Any, group: Any) -> None:
    """Cut an MLX model loaded whole down to this rank's slices, in place (``MlxModel.shard``): the same slices
    ``load_model(..., tensor_group=group)`` reads, taken from memory instead of the file."""
    rank, N = group.rank(), group.size()
    if model.tensor_group is not None:
        raise ModelError("this model is already sharded")
    group_size = next((lin.group_size for b in model.blocks for lin in b.w.values() if getattr(lin, "scales", None)
                       is not None), None)  # fmt: skip
    check_divisible(model.config, N, group_size)

    def cut(x: mx.array | None, axis: int) -> mx.array | None:
        if x is None:
            return None
        step = x.shape[axis] // N
        return x[(slice(None),) * axis + (slice(rank * step, (rank + 1) * step),)]

    def cut_linear(lin: Any, axis: int) -> None:
        lin.w, lin.scales, lin.biases = cut(lin.w, axis), cut(lin.scales, axis), cut(lin.biases, axis)
        mx.eval(*(a for a in (lin.w, lin.scales, lin.biases) if a is not None))

    for block in model.blocks:
        moe = block.w.get("moe")
        for name, axis in SPLIT.items():
            if moe is not None and name in ("gate_proj", "up_proj", "down_proj"):  # experts [E, out, in]: one axis in
                cut_linear(getattr(moe, name.removesuffix("_proj")), axis + 1)
                continue
            cut_linear(block.w[name], axis)
            if axis == 1:
                block.w[name] = AllSum(block.w[name], group)
        if moe is not None:
            moe.group = group  # its partial expert outputs, mixed, then summed over the group
        block.nh, block.nkv = block.nh // N, block.nkv // N
    model.kv_heads = model.config.num_key_value_heads // N
    model.tensor_group = group
