"""A linear layer: ``y = x @ Wᵀ`` for x [..., in] and a weight [out, in], one object per weight, built at load.

The reference graph (block.py, attention.py, mlp.py, model.py) only ever calls ``layer(x)`` and, for the
embedding, ``layer.rows(ids)``; how a weight is stored and which kernel multiplies it is the layer's own business.
``DenseLinear`` (float32, numpy's BLAS) is the reference; ``fs_model.cpu`` adds ``Bf16Linear`` (bf16 bits) and
``AffineLinear`` (4/8-bit codes), each choosing its decode and prefill kernels inside ``matmul``.

``time_matmuls()`` is the public hook for timing the matrix work (benchmarks split a step into "kernels" and
"everything else" with it):

    with time_matmuls() as t:
        model(tokens, 0, caches)
    print(t.calls, t.seconds)
"""

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np


@dataclass
class MatmulTime:
    calls: int = 0
    seconds: float = 0.0


_timer: list[MatmulTime] = []  # the active timer, if any (one at a time, process-wide)


@contextlib.contextmanager
def time_matmuls() -> Iterator[MatmulTime]:
    """Count and time every numpy-backend linear layer's ``x @ Wᵀ`` inside the block (the MLX backend is lazy:
    its products run at ``mx.eval``, so they are not timed here)."""
    t = MatmulTime()
    _timer.append(t)
    try:
        yield t
    finally:
        _timer.remove(t)


T = TypeVar("T")


def timed(matmul: Callable[..., T], *args: Any) -> T:
    """``matmul(*args)``, counted and timed when a ``time_matmuls`` block is active (every layer's product goes
    through here, and so does any kernel that multiplies several layers' weights in one call)."""
    if not _timer:
        return matmul(*args)
    t0 = time.perf_counter()
    y = matmul(*args)
    _timer[-1].calls += 1
    _timer[-1].seconds += time.perf_counter() - t0
    return y


class Linear:
    """Base: ``__call__`` reshapes to rows [M, in], runs ``matmul`` and restores the leading axes.

    One product for all rows: numpy would otherwise run a separate matrix-vector product per leading index,
    re-reading W once per row of a batch."""

    shape: tuple[int, int]  # (out, in)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = timed(self.matmul, x.reshape(-1, x.shape[-1]))
        return y.reshape(*x.shape[:-1], self.shape[0])

    def matmul(self, rows: np.ndarray) -> np.ndarray:
        """rows [M, in] float32 -> [M, out] float32."""
        raise NotImplementedError

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of W as float32 (an embedding lookup): ids [...] -> [..., in]."""
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        raise NotImplementedError


class DenseLinear(Linear):
    """A float32 weight multiplied by numpy's BLAS: the readable reference."""

    def __init__(self, w: np.ndarray):
        self.w = w
        self.shape = w.shape

    def matmul(self, rows: np.ndarray) -> np.ndarray:
        return rows @ self.w.T

    def rows(self, ids: np.ndarray) -> np.ndarray:
        return self.w[ids].astype(np.float32)

    @property
    def nbytes(self) -> int:
        return int(self.w.nbytes)
