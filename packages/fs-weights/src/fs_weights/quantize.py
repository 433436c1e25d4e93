"""MLX affine quantization: the packed-uint32 layout of mlx's ``mx.quantize`` and its exact inverse.

A quantized Linear stores ``weight`` uint32 ``[out, in*bits/32]`` (codes packed least-significant first,
32/bits per word), ``scales`` and ``biases`` ``[out, in/group_size]``; the weight is ``scale*q + bias``
per group of ``group_size`` consecutive inputs.
"""

import numpy as np

from .errors import WeightsError

SUPPORTED_BITS = (2, 4, 8)


def _check(bits: int, group_size: int) -> None:
    if bits not in SUPPORTED_BITS:
        raise WeightsError(f"quantization bits={bits} is not supported (supported: {SUPPORTED_BITS})")
    if group_size <= 0 or group_size % (32 // bits):
        raise WeightsError(f"quantization group_size={group_size} must be a positive multiple of {32 // bits}")


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint32 ``[..., n*bits/32]`` -> uint8 codes ``[..., n]``."""
    per = 32 // bits
    shifts = np.arange(per, dtype=np.uint32) * bits
    codes = (packed[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * per).astype(np.uint8)


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    per = 32 // bits
    c = codes.astype(np.uint32).reshape(*codes.shape[:-1], codes.shape[-1] // per, per)
    return np.bitwise_or.reduce(c << (np.arange(per, dtype=np.uint32) * bits), axis=-1).astype(np.uint32)


def dequantize(packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, *, bits: int, group_size: int) -> np.ndarray:
    """float32 weight ``[out, in]``, computed as mlx does: ``scale * q + bias`` in float32."""
    _check(bits, group_size)
    q = unpack(packed, bits).astype(np.float32)
    n = q.shape[-1]
    if n % group_size or scales.shape[-1] != n // group_size or scales.shape != biases.shape:
        raise WeightsError(
            f"quantized weight of {n} inputs does not match scales {scales.shape} / biases {biases.shape}"
            f" at group_size={group_size}"
        )
    g = q.reshape(*q.shape[:-1], n // group_size, group_size)
    s = scales.astype(np.float32)[..., None]
    b = biases.astype(np.float32)[..., None]
    return (s * g + b).reshape(q.shape)


def quantize(w: np.ndarray, *, bits: int, group_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``w [out, in]`` -> (packed uint32, scales f32, biases f32), bit for bit what ``mx.quantize`` gives for the
    same float32 values (and, after rounding scales and biases to bf16, for bf16 input): per group the edge of
    larger magnitude becomes the bias and maps to an exact code, so that a group's 0 stays exactly 0 when the
    edge is a multiple of the step; the scale is negative when the maximum is that edge."""
    _check(bits, group_size)
    out, n = w.shape
    if n % group_size:
        raise WeightsError(f"input width {n} is not a multiple of group_size {group_size}")
    g = w.astype(np.float32).reshape(out, n // group_size, group_size)
    levels = np.float32((1 << bits) - 1)
    hi, lo = g.max(axis=-1, keepdims=True), g.min(axis=-1, keepdims=True)
    low_edge = np.abs(lo) > np.abs(hi)
    step = np.maximum((hi - lo) / levels, np.float32(1e-7))
    scales = np.where(low_edge, step, -step)
    edge = np.where(low_edge, lo, hi)
    q0 = np.rint(edge / scales)
    scales = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), scales).astype(np.float32)
    biases = np.where(q0 == 0, np.float32(0), edge).astype(np.float32)
    codes = np.clip(np.rint((g - biases) / scales), 0, levels).astype(np.uint8)
    return pack(codes.reshape(out, n), bits), scales[..., 0], biases[..., 0]
