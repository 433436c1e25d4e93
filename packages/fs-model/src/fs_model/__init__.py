"""fs_model: The Qwen3 forward pass: a readable numpy reference backend and an MLX backend."""

import fs_weights as _fs_weights  # noqa: F401 - first: its interrupts guard precedes the heavy imports

from .errors import ModelError
from .loader import load_model
from .model import CausalLM, Model
from .numpy.linear import MatmulTime, time_matmuls

__version__ = "0.1.0"
__all__ = ["CausalLM", "MatmulTime", "Model", "ModelError", "load_model", "time_matmuls"]
