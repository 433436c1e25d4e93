"""The readable float32 reference backend."""

from .model import NumpyModel

__all__ = ["NumpyModel"]
