"""What kind of array is this, and the few operations on it the caches need - for numpy and MLX arrays alike.

The one place in the project that tells an MLX array from a numpy one (MLX is imported only when one is seen);
fs-generate and fs-agent use ``to_numpy`` from here for logits.
"""

from typing import Any

import numpy as np


def is_mlx(x: Any) -> bool:
    return type(x).__module__.startswith("mlx")


def to_numpy(x: Any) -> np.ndarray:
    """Any array as numpy; an MLX bfloat16 array becomes float32 (numpy has no bfloat16)."""
    if is_mlx(x):
        import mlx.core as mx

        return np.array(x.astype(mx.float32) if x.dtype == mx.bfloat16 else x)
    return np.asarray(x)


def index(like: Any, ids: list[int]) -> Any:
    """``ids`` as an index for arrays like ``like`` (MLX gathers need an mx.array)."""
    if is_mlx(like):
        import mlx.core as mx

        return mx.array(ids)
    return ids


def zeros(like: Any, shape: tuple[int, ...]) -> Any:
    if is_mlx(like):
        import mlx.core as mx

        return mx.zeros(shape, dtype=like.dtype)
    return np.zeros(shape, dtype=like.dtype)


def evaluate(*arrays: Any) -> None:
    if arrays and is_mlx(arrays[0]):
        import mlx.core as mx

        mx.eval(*arrays)


def concat(like: Any, arrays: list[Any], axis: int) -> Any:
    if is_mlx(like):
        import mlx.core as mx

        return mx.concatenate(arrays, axis=axis)
    return np.concatenate(arrays, axis=axis)
