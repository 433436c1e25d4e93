"""fs_model: The Qwen3 forward pass: a readable numpy reference backend and an MLX backend."""

from .errors import ModelError
from .loader import load_model
from .model import Model

__version__ = "0.1.0"
__all__ = ["Model", "ModelError", "load_model"]
