"""fs_weights: read, validate, inspect and write Qwen3 checkpoints (safetensors, HF and MLX layouts)."""

from . import interrupts as _interrupts  # noqa: F401 - first: quiet Ctrl-C during the imports below
from .checkpoint import Checkpoint
from .config import GenerationConfig, Qwen3Config, load_config, load_generation_config
from .crosscheck import CrossCheckReport, cross_check, expected_tensors
from .dtypes import bf16_to_f32, f32_to_bf16
from .errors import ConfigError, CrossCheckError, SafetensorsError, WeightsError
from .quantize import dequantize, quantize
from .random_checkpoint import PRESETS, preset, write_random_checkpoint
from .report import tensor_report
from .safetensors import SafetensorsFile, TensorInfo, save_safetensors

__version__ = "0.1.0"
__all__ = [
    "PRESETS",
    "Checkpoint",
    "ConfigError",
    "CrossCheckError",
    "CrossCheckReport",
    "GenerationConfig",
    "Qwen3Config",
    "SafetensorsError",
    "SafetensorsFile",
    "TensorInfo",
    "WeightsError",
    "bf16_to_f32",
    "cross_check",
    "dequantize",
    "expected_tensors",
    "f32_to_bf16",
    "load_config",
    "load_generation_config",
    "preset",
    "quantize",
    "save_safetensors",
    "tensor_report",
    "write_random_checkpoint",
]
