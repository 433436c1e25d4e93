"""fs_generate: greedy and sampled generation, stop rules, streaming, KV-cached decode and the fs-generate CLI."""

from .errors import GenerateError
from .generate import Generation, GenerationStep, generate, generate_batch, stream_generate
from .resolve import load, resolve_model_path
from .sampling import SamplingParams

__version__ = "0.1.0"
__all__ = [
    "GenerateError",
    "Generation",
    "GenerationStep",
    "SamplingParams",
    "generate",
    "generate_batch",
    "load",
    "resolve_model_path",
    "stream_generate",
]
