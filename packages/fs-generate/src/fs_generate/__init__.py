"""fs_generate: greedy and sampled generation, stop rules, streaming, KV-cached decode, the continuous-batching
Engine and the fs-generate CLI."""

import fs_weights as _fs_weights  # noqa: F401 - first: its interrupts guard precedes the heavy imports

from .batch_generate import generate_batch
from .engine import Engine
from .errors import GenerateError
from .generate import generate, stream_generate
from .outputs import Generation, GenerationStep
from .request import RequestHandle
from .resolve import load, resolve_model_path
from .sampling import SamplingParams
from .step import generate_step, greedy, prefill
from .stopping import resolve_eos

__version__ = "0.1.0"
__all__ = [
    "Engine",
    "GenerateError",
    "Generation",
    "GenerationStep",
    "RequestHandle",
    "SamplingParams",
    "generate",
    "generate_batch",
    "generate_step",
    "greedy",
    "load",
    "prefill",
    "resolve_eos",
    "resolve_model_path",
    "stream_generate",
]
