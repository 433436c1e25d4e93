"""The MLX backend (``pip install fs-model[mlx]``; on Linux this pulls ``mlx[cpu]``)."""

try:
    import mlx.core  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    from ..errors import ModelError

    raise ModelError("the MLX backend needs mlx: pip install 'fs-model[mlx]' (Linux: mlx[cpu])") from e

import os

import mlx.core as mx

from .model import MlxModel, from_checkpoint

# `nox -s metal` sets FS_MLX_DEVICE=gpu so the MLX tests provably run on the Apple GPU, not a CPU fallback.
if os.environ.get("FS_MLX_DEVICE") in ("gpu", "cpu"):
    mx.set_default_device(mx.gpu if os.environ["FS_MLX_DEVICE"] == "gpu" else mx.cpu)

__all__ = ["MlxModel", "from_checkpoint"]
