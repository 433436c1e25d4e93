"""bf16 weights kept as their uint16 bit patterns, and the layer that multiplies them.

Batch-1 decode reads every weight once per token, so its speed is weight bytes ÷ memory bandwidth: keeping bf16
weights at 2 bytes instead of float32 copies at 4 halves the bytes. The numba row kernel widens each bf16 row to
float32 in a small per-thread buffer and multiplies it with every input row (parallel over row blocks). Prefill
takes the bf16 GEMM (bf16_gemm.py) where the CPU has AVX512-BF16, else widen-then-BLAS (blas.py); without numba
the same result comes from widening the whole matrix with numpy (correct, not fast).
"""

import numpy as np

from fs_weights import bf16_to_f32

from ..numpy.linear import Linear
from . import HAVE_NUMBA, SWITCHES, bf16_dot_tiles, bf16_gemm, compile_notice, tiles
from .blas import SMALL, blocked_matmul
from .threads import bucket, fan_out

if HAVE_NUMBA:
    from numba import njit, prange

    @njit(parallel=True, fastmath=True, cache=True)
    def _rows_bf16(w: np.ndarray, X: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
        """out[r, i] = X[r] · widen(w[i]): every weight row is read (and widened) once, for all rows r.

        16 weight rows are widened at a time, then met by the input rows 8 at a time, so a prefill's many rows
        are streamed once per 16 weight rows, not once per weight row. Every output element is the same dot loop
        whatever the number of rows (batch invariance: the loop order changes, no element's arithmetic)."""
        n, k = w.shape
        m = X.shape[0]
        for b in prange((n + 15) // 16):
            lo, hi = b * 16, min(n, b * 16 + 16)
            u = np.empty((16, k), np.uint32)
            f = u.view(np.float32)
            for i in range(lo, hi):
                for j in range(k):
                    u[i - lo, j] = np.uint32(w[i, j]) << np.uint32(16)
            for r0 in range(0, m, 8):
                for i in range(lo, hi):
                    fi = f[i - lo]
                    for r in range(r0, min(m, r0 + 8)):
                        acc = np.float32(0.0)
                        for j in range(k):
                            acc += fi[j] * X[r, j]
                        out[r, i] = acc

    @njit(fastmath=True, cache=True)
    def _widen_rows(w: np.ndarray, a: int, out: np.ndarray) -> None:  # pragma: no cover - compiled
        """out[i] = widen(w[a + i]) as uint32 bit patterns; serial on purpose (blas.py says why)."""
        for i in range(out.shape[0]):
            row, o = w[a + i], out[i]
            for j in range(row.shape[0]):
                o[j] = np.uint32(row[j]) << np.uint32(16)


def rows_kernel(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x [m, in] @ widen(w)ᵀ`` for a few rows with numba, reading and widening every bf16 weight once."""
    out = np.empty((x.shape[0], w.shape[0]), np.float32)
    fan_out(("bf16", w.shape, bucket(x.shape[0])), _rows_bf16, w, np.ascontiguousarray(x, dtype=np.float32), out)
    return out


class Bf16Linear(Linear):
    """``x @ Wᵀ`` for W [out, in] held as bf16 bits (uint16): a read-only mmap of a BF16 tensor needs no copy.

    Decode-sized inputs (≤ SMALL rows: a batch's single-token rows), and every input when batch invariance is on
    (the default), take one kernel pass over the weights: the register tiles (tiles.py) where this CPU runs them -
    on AVX512-BF16 with the activations rounded to bf16 (bf16_dot_tiles.py), else float32 ones - or the row kernel;
    otherwise prefill rounds the activations to bf16 on the bf16 GEMM where it applies, or widens blocks of weights
    for BLAS."""

    def __init__(self, w: np.ndarray, bf16_activations: bool = True):
        """``bf16_activations=False``: float32 activations on every CPU (a MoE router: build.py says why)."""
        if w.dtype != np.uint16 or w.ndim != 2:
            raise ValueError(f"Bf16Linear needs a 2-D uint16 array of bf16 bits, got {w.dtype} {w.shape}")
        self.w = w
        self.shape = w.shape
        # decided once: the CPU, the switches and the shape do not change. Batch invariance (the default) takes one
        # kernel for every M - the tiles where they apply, else the row kernel: each output element is one fixed
        # chain of arithmetic, whatever else is in the call
        self.invariant = SWITCHES.batch_invariant
        self.tiled = tiles.applies("bf16", w.shape[1]) and w.strides[1] == 2
        kind = tiles.widest("bf16", w.shape[1], 0, bf16_activations) if self.tiled else ""
        # every call on bf16d tiles (batch invariance): the weights interleaved per 4 rows, one stream a tile
        # (bf16_dot_tiles.interleave says why); kept in that layout only, so no other path may read them as rows
        self.interleaved = kind == "bf16d" and self.invariant and w.shape[0] % bf16_dot_tiles.ROWS == 0
        if self.interleaved:
            compile_notice.expect("bf16 weights")  # the copy's kernel may be the load's first compile
            self.w, kind = bf16_dot_tiles.interleave(w), "bf16di"
        self.tiles = tiles.Tiled(kind, self.w) if self.tiled else None
        self.gemm = bf16_gemm.applies(w) and not self.invariant and bf16_activations

    def matmul(self, rows: np.ndarray) -> np.ndarray:
        if self.tiles is not None and (self.interleaved or rows.shape[0] <= SMALL or self.invariant):
            return self.tiles(rows)
        if not HAVE_NUMBA:
            return rows @ bf16_to_f32(self.w).T
        small = rows.shape[0] <= SMALL
        if small or self.invariant:
            return rows_kernel(rows, self.w)
        if self.gemm:
            return bf16_gemm.matmul(rows, self.w)
        n, k = self.w.shape
        return blocked_matmul(rows, n, k, lambda a, buf: _widen_rows(self.w, a, buf.view(np.uint32)))

    def rows(self, ids: np.ndarray) -> np.ndarray:
        return bf16_to_f32(bf16_dot_tiles.rows_of(self.w, ids) if self.interleaved else self.w[ids])

    @property
    def uses_numba_threads(self) -> bool:
        """True when a prefill through this layer runs on numba's pool (BLAS must keep off the cores)."""
        return self.gemm

    @property
    def nbytes(self) -> int:
        return int(self.w.nbytes)
