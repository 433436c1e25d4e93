"""mlx-lm's ``--kv-bits``: keep the KV cache as affine 2/4/8-bit codes once it holds enough positions.

The rule is mlx-lm's ``maybe_quantize_kv_cache``: a full-precision dense cache holding at least ``start`` positions
is replaced by a quantized one (``model.quantize_cache``); from then on each new position is quantized as it is
written and attention reads the codes. Before that the cache stays exact, so short prompts with the CLI's default
start (5000, mlx-lm's) never pay for it. mlx-lm checks after every forward pass; fs checks after every pass and
before the first one, so with ``start=0`` (the Python API's default) no pass ever reads exact K/V - the engine's
``kv_bits``, whose pool keeps codes from the first position (vLLM's ``--kv-cache-dtype`` and llama.cpp's ``-ctk``
do the same), then equals ``generate`` bit for bit, and a prompt's result does not depend on how it was chunked.

Worked example (``start=0``, a 12-token prompt): the caches are quantized while empty, the prompt's pass writes its
12 positions as codes and attends over them, and every decode step after it does the same with its one position.
With ``start=12`` the prompt's pass attends over exact K/V, the caches then become 12 positions of codes.
Bytes per cached position and layer for 8 kv heads of 128 dims (Qwen3-0.6B): bf16 4096; 8-bit, group 64: 2304
(codes 2048 + scales and biases 256, float32 on the numpy backend); 4-bit: 1280.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fs_kvcache import KV_BITS, DenseKVCache
from fs_model import CausalLM

from .errors import GenerateError

__all__ = ["DEFAULT_QUANTIZED_KV_START", "KV_BITS", "KV_GROUP_SIZES", "KVBits"]  # KV_BITS: fs-kvcache's, for the CLIs

KV_GROUP_SIZES = (32, 64, 128)  # mlx-lm's
DEFAULT_QUANTIZED_KV_START = 5000  # mlx-lm's CLI default (its Python API's is 0, as ``generate``'s here)


@dataclass(frozen=True)
class KVBits:
    bits: int
    group_size: int = 64
    start: int = 0

    def __post_init__(self) -> None:
        if self.bits not in KV_BITS:
            raise GenerateError(f"kv_bits must be one of {KV_BITS}, got {self.bits!r}")
        if self.group_size not in KV_GROUP_SIZES:
            raise GenerateError(f"kv_group_size must be one of {KV_GROUP_SIZES}, got {self.group_size!r}")
        if type(self.start) is not int or self.start < 0:
            raise GenerateError(f"quantized_kv_start must be an int >= 0, got {self.start!r}")

    def check(self, model: CausalLM) -> None:
        D = model.config.dim_head
        if D % self.group_size:
            raise GenerateError(f"kv_group_size {self.group_size} does not divide this model's head_dim {D}")

    def __call__(self, model: Any, caches: Sequence[Any] | None) -> None:
        """Before the first pass and after every pass: quantize, in place in the list, every dense cache that has
        reached ``start``."""
        if caches is None:
            return
        assert isinstance(caches, list)
        for i, c in enumerate(caches):
            if type(c) is DenseKVCache and c.offset >= self.start:
                caches[i] = model.quantize_cache(c, self.bits, self.group_size)
