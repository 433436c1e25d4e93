"""The few array operations the caches need, for numpy and MLX arrays alike (MLX imported only if used)."""

from typing import Any

import numpy as np


def is_mlx(x: Any) -> bool:
    return type(x).__module__.startswith("mlx")


def zeros(like: Any, shape: tuple[int, ...]) -> Any:
    if is_mlx(like):
        import mlx.core as mx

        return mx.zeros(shape, dtype=like.dtype)
    return np.zeros(shape, dtype=like.dtype)


def evaluate(*arrays: Any) -> None:
    if arrays and is_mlx(arrays[0]):
        import mlx.core as mx

        mx.eval(*arrays)
