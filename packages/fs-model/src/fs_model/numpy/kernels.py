"""CPU kernels for bf16 weights kept as their uint16 bit patterns (``pip install 'fs-model[fast]'`` for numba).

Batch-1 decode reads every weight once per token, so its speed is weight bytes ÷ memory bandwidth: keeping bf16
weights at 2 bytes instead of float32 copies at 4 halves the bytes. numba widens each bf16 row to float32 in a
small per-thread buffer and multiplies (parallel over row blocks); without numba the same result comes from
widening the whole matrix with numpy (correct, not fast).

Prefill is compute-bound instead: a weight is used by every prompt row, so it is widened (or dequantized) once
per call into a reusable float32 scratch buffer, one thread, and multiplied by numpy's BLAS. The widening thread
is deliberately serial: alternating numba's thread pool with OpenBLAS's, each spinning on the cores the other
needs, measured 20× slower than either alone (docs/performance.md).
"""

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

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

    @njit(fastmath=True, cache=True)
    def _widen_rows(w: np.ndarray, a: int, out: np.ndarray) -> None:  # pragma: no cover - compiled
        """out[i] = widen(w[a + i]) as uint32 bit patterns; serial on purpose (see the module docstring)."""
        for i in range(out.shape[0]):
            row, o = w[a + i], out[i]
            for j in range(row.shape[0]):
                o[j] = np.uint32(row[j]) << np.uint32(16)


SMALL = 8  # up to this many input rows (a decode step of a batch): one pass over the stored weights
SCRATCH_FLOATS = 1 << 22  # 16 MiB: every Qwen3-0.6B layer matrix at once; bigger ones (lm_head) go in row chunks
_scratch = threading.local()


def scratch(rows: int, k: int) -> np.ndarray:
    """A reusable float32 [rows, k] buffer, one per thread (generators may run in threads)."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < rows * k:
        buf = _scratch.buf = np.empty(rows * k, np.float32)
    return buf[: rows * k].reshape(rows, k)


def blocked_matmul(x: np.ndarray, n: int, k: int, fill: Callable[[int, np.ndarray], None]) -> np.ndarray:
    """``x [M, k] @ Wᵀ`` for a stored ``W [n, k]`` that ``fill(a, buf)`` expands (rows a .. a+len(buf)) into
    float32: chunks of at most SCRATCH_FLOATS, each multiplied by BLAS while it is still in cache."""
    rows = max(1, min(n, SCRATCH_FLOATS // k))
    if rows == n:
        buf = scratch(n, k)
        fill(0, buf)
        return x @ buf.T
    y = np.empty((x.shape[0], n), np.float32)
    for a in range(0, n, rows):
        buf = scratch(min(rows, n - a), k)
        fill(a, buf)
        y[:, a : a + buf.shape[0]] = x @ buf.T
    return y


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
    y = rows_kernel(x[None], w)
    return widen(w) @ x if y is None else y[0]


def linear_bf16(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ wᵀ`` for x [..., in] float32 and bf16-bits w [out, in]: one kernel pass over the weights for
    decode-sized inputs (a batch's single-token rows); for prefill the bf16 GEMM (bf16_gemm.py) where the CPU has
    AVX512-BF16, else a widen-then-BLAS product."""
    rows = x.reshape(-1, x.shape[-1])
    y = rows_kernel(rows, w)
    if y is None:
        from . import bf16_gemm  # imported here: it builds on this module

        if bf16_gemm.applies(w):
            y = bf16_gemm.matmul(rows, w)
        elif HAVE_NUMBA:
            n, k = w.shape
            y = blocked_matmul(rows, n, k, lambda a, buf: _widen_rows(w, a, buf.view(np.uint32)))
        else:
            y = rows @ widen(w).T
    return y.reshape(*x.shape[:-1], w.shape[0])


_blas: list[Any] = []  # the threadpoolctl controller, found once (it scans the loaded libraries)


def one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """OpenBLAS on one thread for the duration: while numba's pool runs the matrix products, OpenBLAS's own
    threads (spinning after each call) would take the cores from it - a bf16 prefill measured 185 tok/s with both
    pools and 265-290 with one (docs/performance.md). A no-op without threadpoolctl."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - fs-model[fast] installs it
        return contextlib.nullcontext()
    if not _blas:
        _blas.append(ThreadpoolController())
    return _blas[0].limit(limits=1, user_api="blas")
