"""Fused step work for the numba path: one compiled call where numpy needs many.

A decode step (S = 1) spends its time reading weights; the numpy glue between the matrix kernels (RMSNorm, the
per-head q/k norm and RoPE, rounding K/V to bf16 or quantizing them for the cache) is a dozen small array
operations per layer, each a few microseconds of dispatch for a few kilobytes of data (docs/performance.md). These
kernels do the same arithmetic in one pass each, in float32, per row, so with batch invariance on (the default)
they serve prefill too and a token gets the same bits however it was computed. Attention is its own kernel
(attention.py). They are tested against the readable numpy path (norm.py, rope.py, kv_quant.py), which stays the
reference and runs whenever numba is absent, ``FS_REFERENCE_PATH=1`` is set, or the weights are float32; with
``FS_BATCH_INVARIANT=0`` prefill (S > 1) takes it too (decode_step.py decides, once, when the model is built).
"""

import numpy as np

from . import HAVE_NUMBA
from .threads import PARALLEL_FLOATS, both

if HAVE_NUMBA:
    from numba import njit, prange

    # No fastmath in this module: these kernels are also called from inside other compiled functions
    # (compiled_block.py), where the optimizer would be free to reorder a fast-math sum another way than in a call
    # from Python; strict float32 arithmetic gives every caller the same bits (tests/test_compiled_block.py).
    def _rms_impl(x, w, eps, out):  # pragma: no cover - compiled
        H = x.shape[1]
        for r in prange(x.shape[0]):
            ss = np.float32(0.0)
            for j in range(H):
                ss += x[r, j] * x[r, j]
            inv = np.float32(1.0) / np.sqrt(ss / np.float32(H) + eps)
            for j in range(H):
                out[r, j] = x[r, j] * inv * w[j]

    _rms_serial, _rms_parallel = both(_rms_impl)

    @njit(cache=True)
    def _rms_rows(x, w, eps, out):  # pragma: no cover - compiled
        """out = RMSNorm(x) · w row by row, x/out [m, H]: over the pool from PARALLEL_FLOATS floats."""
        if x.size >= PARALLEL_FLOATS:
            _rms_parallel(x, w, eps, out)
        else:
            _rms_serial(x, w, eps, out)

    def _norm_rope_impl(x, w, eps, cos, sin, out):  # pragma: no cover - compiled
        B, nh, D = x.shape
        half = D // 2
        for b in prange(B):
            for h in range(nh):
                ss = np.float32(0.0)
                for d in range(D):
                    ss += x[b, h, d] * x[b, h, d]
                inv = np.float32(1.0) / np.sqrt(ss / np.float32(D) + eps)
                for i in range(half):
                    x1 = x[b, h, i] * inv * w[i]
                    x2 = x[b, h, i + half] * inv * w[i + half]
                    out[b, h, i] = x1 * cos[b, i] - x2 * sin[b, i]
                    out[b, h, i + half] = x1 * sin[b, i] + x2 * cos[b, i]

    _norm_rope_serial, _norm_rope_parallel = both(_norm_rope_impl)

    @njit(cache=True)
    def _norm_rope(x, w, eps, cos, sin, out):  # pragma: no cover - compiled
        """Per-head RMSNorm then split-half RoPE; x/out [B, heads, D], cos/sin [B, D/2]."""
        if x.size >= PARALLEL_FLOATS:
            _norm_rope_parallel(x, w, eps, cos, sin, out)
        else:
            _norm_rope_serial(x, w, eps, cos, sin, out)

    def _to_bf16_impl(u, out):  # pragma: no cover - compiled
        for i in prange(u.shape[0]):
            v = u[i]
            if (v & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
                out[i] = np.uint16(0x7FC0)
            else:
                out[i] = np.uint16((v + ((v >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)) >> np.uint32(16))

    _to_bf16_serial, _to_bf16_parallel = both(_to_bf16_impl)

    @njit(cache=True)
    def _to_bf16(u, out):  # pragma: no cover - compiled
        """fs_weights.f32_to_bf16 in one pass: round to nearest even, NaN -> 0x7FC0 (the same bits, tested)."""
        if u.size >= PARALLEL_FLOATS:
            _to_bf16_parallel(u, out)
        else:
            _to_bf16_serial(u, out)

    @njit(cache=True)
    def _quantize_rows(x, bits, gs, bf16, codes, scales, biases):  # pragma: no cover - compiled
        """fs_weights.quantize on rows x [N, D], one pass, the same float32 operations in the same order (no
        fastmath: the codes, scales and biases are its bits - tested); ``bf16`` rounds scales and biases to bf16
        (round to nearest even) as kv_quant.quantize_kv does."""
        N, D = x.shape
        levels = np.float32((1 << bits) - 1)
        per = 32 // bits
        tiny = np.float32(1e-7)
        for n in range(N):
            for grp in range(D // gs):
                lo_d = grp * gs
                hi, lo = x[n, lo_d], x[n, lo_d]
                for d in range(lo_d, lo_d + gs):
                    hi, lo = max(hi, x[n, d]), min(lo, x[n, d])
                low_edge = abs(lo) > abs(hi)
                step = max((hi - lo) / levels, tiny)
                sc = step if low_edge else -step
                edge = lo if low_edge else hi
                q0 = np.rint(edge / sc)
                if q0 != 0:
                    sc, bi = edge / q0, edge
                else:
                    bi = np.float32(0.0)
                scales[n, grp], biases[n, grp] = sc, bi
                for d in range(lo_d, lo_d + gs):
                    c = min(max(np.rint((x[n, d] - bi) / sc), np.float32(0.0)), levels)
                    w, j = d // per, d % per
                    if j == 0:
                        codes[n, w] = np.uint32(0)
                    codes[n, w] |= np.uint32(c) << np.uint32(j * bits)
        if bf16:
            for a in (scales, biases):
                u = a.reshape(-1).view(np.uint32)
                for i in range(u.shape[0]):
                    v = u[i]
                    if (v & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
                        u[i] = np.uint32(0x7FC00000)
                    else:
                        u[i] = ((v + ((v >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)) >> np.uint32(16)) << 16


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), x's shape, contiguous: the K/V a bf16 cache stores, one compiled pass instead
    of fs_weights.f32_to_bf16's eight numpy ones (2.9 ms of a 0.6B decode step under the profiler)."""
    flat = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(flat.shape, np.uint16)
    _to_bf16(flat.reshape(-1).view(np.uint32), out.reshape(-1))
    return out


def quantize_kv(x: np.ndarray, bits: int, group_size: int, bf16: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kv_quant.quantize_kv (the same bits) in one compiled call: K or V [B, kv_heads, S, D], float32 or bf16 bits
    -> (codes uint32, scales, biases float32). 56 numpy-glue calls cost 4.5 ms of a 0.6B decode step."""
    if x.dtype == np.uint16:
        x = (x.astype(np.uint32) << 16).view(np.float32)
    B, H, S, D = x.shape
    rows = np.ascontiguousarray(x, dtype=np.float32).reshape(B * H * S, D)
    codes = np.empty((rows.shape[0], D * bits // 32), np.uint32)
    scales = np.empty((rows.shape[0], D // group_size), np.float32)
    biases = np.empty_like(scales)
    _quantize_rows(rows, bits, group_size, bf16, codes, scales, biases)
    return codes.reshape(B, H, S, -1), scales.reshape(B, H, S, -1), biases.reshape(B, H, S, -1)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    rows = np.ascontiguousarray(x.reshape(-1, x.shape[-1]), dtype=np.float32)
    out = np.empty_like(rows)
    _rms_rows(rows, w, np.float32(eps), out)
    return out.reshape(x.shape)


def norm_rope(x: np.ndarray, w: np.ndarray, eps: float, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Per-head RMSNorm then RoPE. x [B, heads, D] (one token per row) or [B, S, heads, D]; cos/sin as
    RoPE.tables gives them: [S, D/2] for positions shared by every row, [B, 1, S, D/2] for per-row ones."""
    one = x.ndim == 3
    x4 = x[:, None] if one else x
    B, S, nh, D = x4.shape
    half = D // 2
    rows = cos.shape[0] if cos.ndim == 4 else 1
    if rows != B:  # positions shared by every row (a decode batch at one offset): the same table for each
        cos = np.broadcast_to(cos.reshape(rows, S, half), (B, S, half))
        sin = np.broadcast_to(sin.reshape(rows, S, half), (B, S, half))
    cos, sin = cos.reshape(B * S, half), sin.reshape(B * S, half)
    out = np.empty((B * S, nh, D), np.float32)
    flat = np.ascontiguousarray(x4.reshape(B * S, nh, D), dtype=np.float32)
    _norm_rope(flat, w, np.float32(eps), np.ascontiguousarray(cos), np.ascontiguousarray(sin), out)
    return out.reshape(x.shape)
