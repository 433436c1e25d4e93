"""The MLX backend (``pip install fs-model[mlx]``; on Linux this pulls ``mlx[cpu]``)."""

try:
    import mlx.core  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    from ..errors import ModelError

    raise ModelError("the MLX backend needs mlx: pip install 'fs-model[mlx]' (Linux: mlx[cpu])") from e

from .model import MlxModel

__all__ = ["MlxModel"]
