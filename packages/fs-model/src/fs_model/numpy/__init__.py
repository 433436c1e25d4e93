"""The numpy backend: the readable float32 reference graph. ``build.from_checkpoint`` assembles it from a checkpoint
with the layers and kernels of ``fs_model.cpu``; this package itself imports no kernel module."""

from .linear import DenseLinear, Linear, MatmulTime, time_matmuls
from .model import NumpyModel

__all__ = ["DenseLinear", "Linear", "MatmulTime", "NumpyModel", "time_matmuls"]
