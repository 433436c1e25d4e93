"""CPU kernels for bf16 weights kept as their uint16 bit patterns (``pip install 'fs-model[fast]'`` for numba).

Batch-1 decode reads every weight once per token, so its speed is weight bytes ÷ memory bandwidth: keeping bf16
weights at 2 bytes instead of float32 copies at 4 halves the bytes. numba widens each bf16 row to float32 in a
small per-thread buffer and multiplies (parallel over row blocks); without numba the same result comes from
widening the whole matrix with numpy (correct, not fast).
"""

import os

import numpy as np

try:
    import numba
    from numba import njit, prange

    HAVE_NUMBA = True
    # FS_NUM_THREADS caps the kernels' threads (default: every usable core, numba's own default)
    if os.environ.get("FS_NUM_THREADS", "").isdigit() and int(os.environ["FS_NUM_THREADS"]) > 0:
        numba.set_num_threads(min(int(os.environ["FS_NUM_THREADS"]), numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_NUMBA = False


def widen(bits: np.ndarray) -> np.ndarray:
    """bf16 bits (uint16) -> float32, exact."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


if HAVE_NUMBA:

    @njit(parallel=True, fastmath=True, cache=True)
    def _matvec_bf16(w: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
        n, k = w.shape
        for b in prange((n + 15) // 16):
            u = np.empty(k, np.uint32)
            f = u.view(np.float32)
            for i in range(b * 16, min(n, b * 16 + 16)):
                for j in range(k):
                    u[j] = np.uint32(w[i, j]) << np.uint32(16)
                acc = np.float32(0.0)
                for j in range(k):
                    acc += f[j] * x[j]
                out[i] = acc

    @njit(parallel=True, fastmath=True, cache=True)
    def _rows_bf16(w: np.ndarray, X: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
        """out[r, i] = X[r] · widen(w[i]) for a few rows r: every weight row is read (and widened) once."""
        n, k = w.shape
        m = X.shape[0]
        for b in prange((n + 15) // 16):
            u = np.empty(k, np.uint32)
            f = u.view(np.float32)
            for i in range(b * 16, min(n, b * 16 + 16)):
                for j in range(k):
                    u[j] = np.uint32(w[i, j]) << np.uint32(16)
                for r in range(m):
                    acc = np.float32(0.0)
                    for j in range(k):
                        acc += f[j] * X[r, j]
                    out[r, i] = acc


SMALL = 8  # up to this many input rows (a decode step of a batch): one pass over the bf16 weights


def rows_kernel(x: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """``x [m, in] @ widen(w)ᵀ`` for a few rows with numba, reading and widening every bf16 weight once (a float32
    weight is left to BLAS, which is as fast for these shapes); None when no kernel applies."""
    if not HAVE_NUMBA or x.shape[0] > SMALL or w.dtype != np.uint16:
        return None
    out = np.empty((x.shape[0], w.shape[0]), np.float32)
    _rows_bf16(w, np.ascontiguousarray(x, dtype=np.float32), out)
    return out


def matvec_bf16(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x @ widen(w).T`` for one row ``x [in]`` and ``w [out, in]`` uint16 bf16 bits -> float32 ``[out]``."""
    if not HAVE_NUMBA:
        return widen(w) @ x
    out = np.empty(w.shape[0], np.float32)
    _matvec_bf16(w, np.ascontiguousarray(x, dtype=np.float32), out)
    return out


def linear_bf16(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ wᵀ`` for x [..., in] float32 and bf16-bits w [out, in]: one kernel pass over the weights for
    decode-sized inputs (a batch's single-token rows), one widened BLAS product for prefill (where compute, not
    bytes, is the cost)."""
    rows = x.reshape(-1, x.shape[-1])
    y = rows_kernel(rows, w)
    if y is None:
        y = np.stack([matvec_bf16(w, r) for r in rows]) if rows.shape[0] <= SMALL else rows @ widen(w).T
    return y.reshape(*x.shape[:-1], w.shape[0])
