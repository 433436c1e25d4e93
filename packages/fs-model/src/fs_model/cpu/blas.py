"""Products on numpy's BLAS for weights stored in another format, and keeping BLAS's threads out of the way.

Prefill is compute-bound: a weight is used by every prompt row, so a bf16 or quantized matrix is expanded to
float32 once per call into a reusable scratch buffer (a chunk at a time, each multiplied while it is still in
cache) and multiplied by BLAS. The expanding loops are serial on purpose: alternating numba's thread pool with
OpenBLAS's, each spinning on the cores the other needs, measured 20× slower than either alone.
"""

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

SMALL = 8  # up to this many input rows (a decode step of a batch): one kernel pass over the stored weights
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


_blas: list[Any] = []  # the threadpoolctl controller, found once (it scans the loaded libraries)


def limit_blas_threads(n: int) -> None:
    """Cap OpenBLAS's threads for the rest of the process (``--threads``); a no-op without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dependency of fs-model
        return
    threadpool_limits(limits=n, user_api="blas")


def one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """OpenBLAS on one thread for the duration: while numba's pool runs the matrix products, OpenBLAS's own
    threads (spinning after each call) would take the cores from it - a bf16 prefill measured 185 tok/s with both
    pools and 265-290 with one (docs/performance.md). A no-op without threadpoolctl."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - a dependency of fs-model
        return contextlib.nullcontext()
    if not _blas:
        _blas.append(ThreadpoolController())
    return _blas[0].limit(limits=1, user_api="blas")
