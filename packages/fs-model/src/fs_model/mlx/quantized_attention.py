"""Attention over a quantized K/V cache on MLX (``--kv-bits``): the keys and values stay packed, and both products
run as ``mx.quantized_matmul`` - the same arithmetic as mlx-lm's quantized scaled-dot-product attention, so the
two agree bit for bit on one device.

q [B, nh, S, D]; K and V the cache's triples (codes, scales, biases), each ``[B, nkv, T, *]``. The G = nh/nkv
query heads of a kv head are one extra axis (``[B, nkv, G, S, D]``) against K/V broadcast over it, so no head is
copied. ``mask``: ``"causal"`` (query i at position T-S+i sees keys 0..T-S+i), a boolean array (True = visible:
[S, T] or per row [B, 1, S, T]) or None.
"""

from typing import Any

import mlx.core as mx


def quantize_kv(x: mx.array, bits: int, group_size: int) -> "Triple":
    """K or V [B, nkv, S, D] as the affine triple a QuantizedKVCache keeps (scales/biases in x's dtype)."""
    codes, scales, biases = mx.quantize(x, group_size=group_size, bits=bits)
    return codes, scales, biases


Triple = tuple[mx.array, mx.array, mx.array]


def quantized_attention(
    q: mx.array, K: Triple, V: Triple, scale: float, mask: Any, bits: int, group_size: int
) -> mx.array:
    B, nh, S, D = q.shape
    nkv = K[0].shape[1]
    G = nh // nkv
    q = q * scale
    if G > 1:
        q = q.reshape(B, nkv, G, S, D)
        K = (mx.expand_dims(K[0], -3), mx.expand_dims(K[1], -3), mx.expand_dims(K[2], -3))
        V = (mx.expand_dims(V[0], -3), mx.expand_dims(V[1], -3), mx.expand_dims(V[2], -3))
    scores = mx.quantized_matmul(q, K[0], K[1], K[2], transpose=True, group_size=group_size, bits=bits)  # [.., S, T]
    if isinstance(mask, str):
        T = scores.shape[-1]
        mask = mx.arange(T - S, T)[:, None] >= mx.arange(T)[None]
    if mask is not None:
        if G > 1 and mask.ndim == 4:  # per row [B, 1, S, T]: broadcast over the G axis too
            mask = mx.expand_dims(mask, 2)
        scores = mx.where(mask, scores, mx.finfo(scores.dtype).min)
    probs = mx.softmax(scores, axis=-1, precise=True)
    out = mx.quantized_matmul(probs, V[0], V[1], V[2], transpose=False, group_size=group_size, bits=bits)
    return out.reshape(B, nh, S, D) if G > 1 else out
