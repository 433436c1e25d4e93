"""``QuantizedKVCache``: a dense cache whose keys and values are kept in MLX's affine 4/8-bit layout (mlx-lm's
``--kv-bits``): a quarter to a half of a bf16 cache's bytes, to keep and to read per decoded token.

Each side is a triple, as ``mx.quantize`` returns it for ``x [B, kv_heads, S, D]``: codes uint32
``[B, kv_heads, S, D*bits/32]`` (packed least-significant first), scales and biases ``[B, kv_heads, S,
D/group_size]``; position s of head h is ``scale * code + bias`` per group of ``group_size`` consecutive dims.
Quantizing is per position, so a position's triple never changes once written.

The cache does not quantize: the model does (fs-model owns the arithmetic, fs-weights the rule), and hands
``update_and_fetch`` the triples of the new positions. Growth, ``trim`` and ``fork`` are ``DenseKVCache``'s,
applied to the six arrays together.
"""

from typing import Any

from .dense import DenseKVCache
from .errors import KVCacheError

KV_BITS = (2, 4, 8)  # what the affine layout packs evenly into uint32 words (mlx-lm accepts these too)


class QuantizedKVCache(DenseKVCache):
    def __init__(self, bits: int, group_size: int, key_values: tuple[Any, Any] | None = None):
        if bits not in KV_BITS:
            raise KVCacheError(f"kv bits must be one of {KV_BITS}, got {bits!r}")
        if type(group_size) is not int or group_size <= 0 or group_size % (32 // bits):
            raise KVCacheError(f"kv group size must be a positive multiple of {32 // bits}, got {group_size!r}")
        self.bits, self.group_size = bits, group_size
        super().__init__(key_values)

    def _join(self, keys: Any, values: Any) -> tuple[Any, ...]:
        for name, side in (("keys", keys), ("values", values)):
            if not isinstance(side, tuple) or len(side) != 3:
                raise KVCacheError(f"a quantized cache takes {name} as (codes, scales, biases), got {type(side)}")
            codes, scales, biases = side
            if any(len(a.shape) != 4 for a in side) or len({a.shape[2] for a in side}) != 1:
                raise KVCacheError(f"{name} parts {[tuple(a.shape) for a in side]} must be [B, kv_heads, S, *]")
            D = codes.shape[3] * 32 // self.bits
            groups = (D // self.group_size,)
            if D % self.group_size or tuple(scales.shape[3:]) != groups or scales.shape != biases.shape:
                raise KVCacheError(
                    f"{name}: codes {tuple(codes.shape)} at {self.bits} bits hold {D} dims, which scales"
                    f" {tuple(scales.shape)} / biases {tuple(biases.shape)} do not match"
                    f" at group size {self.group_size}"
                )
        if keys[0].shape[:3] != values[0].shape[:3]:
            k, v = tuple(keys[0].shape), tuple(values[0].shape)
            raise KVCacheError(f"keys {k} and values {v} differ in B, heads or S")
        return (*keys, *values)

    def _split(self, parts: tuple[Any, ...]) -> tuple[Any, Any]:
        return tuple(parts[:3]), tuple(parts[3:])

    def _empty(self) -> "QuantizedKVCache":
        return QuantizedKVCache(self.bits, self.group_size)

    def __repr__(self) -> str:
        return f"QuantizedKVCache(offset={self.offset}, bits={self.bits}, group_size={self.group_size})"
