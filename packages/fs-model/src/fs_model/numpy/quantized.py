"""Affine-quantized weights kept quantized in memory: w = scale·q + bias per group of G inputs (MLX's format).

MLX 8-bit packs four codes per uint32, least significant first, which is exactly the uint8 byte order: the packed
tensor *viewed as uint8* is the code matrix, with no copy. 4-bit packs two codes per byte (low nibble first).
``x · w_row = Σ_g scale_g·(q_g · x_g) + bias_g·Σ x_g``, so a kernel reads 1 (or ½) byte per weight plus the
per-group scale and bias. ``quantize_affine`` makes the same layout from float weights (``quantize="int8"``).
"""

from dataclasses import dataclass

import numpy as np

from fs_weights import dequantize, quantize

try:
    from numba import njit, prange

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_NUMBA = False


@dataclass(frozen=True)
class AffineWeight:
    codes: np.ndarray  # uint8 [out, in] (8-bit) or [out, in/2] (4-bit, two codes per byte)
    scales: np.ndarray  # float32 [out, in/G]
    biases: np.ndarray  # float32 [out, in/G]
    bits: int
    group_size: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape[0], self.scales.shape[1] * self.group_size

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.scales.nbytes + self.biases.nbytes

    def packed(self) -> np.ndarray:
        """The MLX uint32 packing (for fs_weights.dequantize)."""
        return np.ascontiguousarray(self.codes).view(np.uint32)

    def dequantize(self) -> np.ndarray:
        return dequantize(self.packed(), self.scales, self.biases, bits=self.bits, group_size=self.group_size)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Dequantized rows (an embedding lookup)."""
        part = AffineWeight(
            self.codes[ids.reshape(-1)],
            self.scales[ids.reshape(-1)],
            self.biases[ids.reshape(-1)],
            self.bits,
            self.group_size,
        )
        return part.dequantize().reshape(*ids.shape, self.shape[1])


def from_mlx(packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int, group: int) -> AffineWeight:
    if bits not in (4, 8):
        raise ValueError(f"{bits}-bit weights have no CPU kernel (4 and 8 do)")
    return AffineWeight(
        np.asarray(packed).view(np.uint8), scales.astype(np.float32), biases.astype(np.float32), bits, group
    )


def quantize_affine(w: np.ndarray, bits: int = 8, group: int = 64) -> AffineWeight:
    packed, scales, biases = quantize(np.asarray(w, np.float32), bits=bits, group_size=group)
    return from_mlx(packed, scales, biases, bits, group)


if HAVE_NUMBA:
    # Each thread widens one row at a time into a float32 buffer, then takes per-group dot products. Codes go
    # through int32 on the way to float32: LLVM vectorises that conversion, not uint8 -> float32 (8x slower here).

    @njit(parallel=True, fastmath=True, cache=True)
    def _matvec_q(q, scales, biases, x, xsum, G, bits, out):  # pragma: no cover - compiled
        n = q.shape[0]
        k = scales.shape[1] * G
        for blk in prange((n + 15) // 16):
            f = np.empty(k, np.float32)
            for i in range(blk * 16, min(n, blk * 16 + 16)):
                row = q[i]
                if bits == 8:
                    for j in range(k):
                        f[j] = np.float32(np.int32(row[j]))
                else:
                    for j in range(k // 2):
                        b = np.int32(row[j])
                        f[2 * j] = np.float32(b & 15)
                        f[2 * j + 1] = np.float32(b >> 4)
                acc = np.float32(0.0)
                for g in range(k // G):
                    s = np.float32(0.0)
                    base = g * G
                    for j in range(G):
                        s += f[base + j] * x[base + j]
                    acc += scales[i, g] * s + biases[i, g] * xsum[g]
                out[i] = acc


def matvec_affine(w: AffineWeight, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not HAVE_NUMBA:
        return w.dequantize() @ x
    xsum = x.reshape(-1, w.group_size).sum(axis=1).astype(np.float32)
    out = np.empty(w.shape[0], np.float32)
    _matvec_q(w.codes, w.scales, w.biases, x, xsum, w.group_size, w.bits, out)
    return out


def linear_affine(x: np.ndarray, w: AffineWeight) -> np.ndarray:
    rows = x.reshape(-1, x.shape[-1])
    y = np.stack([matvec_affine(w, r) for r in rows]) if rows.shape[0] <= 4 else rows @ w.dequantize().T
    return y.reshape(*x.shape[:-1], w.shape[0])
