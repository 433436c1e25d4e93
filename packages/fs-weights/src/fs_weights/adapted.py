"""A checkpoint with a LoRA adapter fused in at load: every reader (both model backends, convert) sees the adapted
weights through the ``Checkpoint`` methods it already uses, so the fast paths and their contracts are unchanged.

What an adapted weight is stored as (the one decision, made here):
- a float weight (F32 / BF16 / F16) stays in its dtype: ``W' = round(W + scale · B @ A)``, computed in float32 and
  rounded once, so a bf16 model still runs on the bf16 kernels;
- a quantized weight (MLX 4/8-bit, GGUF) becomes BF16: dequantized, updated, rounded once. Re-quantizing would
  round away most of a LoRA update (its entries are far below a 4-bit step), so the adapted matrices read 2 bytes
  per weight instead of 0.5-1; the others keep their codes. ``fs-weights fuse`` re-quantizes, as mlx_lm.fuse does.
"""

import hashlib

import numpy as np

from .adapter import Adapter, AdapterError
from .checkpoint import Checkpoint
from .dtypes import from_float32, to_float32
from .safetensors import TensorInfo

QUANTIZED_AS = "BF16"  # what an adapted quantized weight is kept as (see the module docstring)


class AdaptedCheckpoint(Checkpoint):
    """``base`` with ``adapter``'s updates applied to the weights it names (each computed when it is read)."""

    def __init__(self, base: Checkpoint, adapter: Adapter):  # not super().__init__: the base's files are open
        self.__dict__.update(base.__dict__)
        self.base, self.adapter = base, adapter
        missing = [n for n in adapter.updates if n not in base]
        if missing:
            raise AdapterError(
                f"{adapter.path}: the adapter updates {missing[0]!r}, which {base.source} does not have "
                "(an adapter for another model?)"
            )
        self.codes: dict[str, str] = {}  # adapted weight -> the dtype it is stored as now
        for name, update in adapter.updates.items():
            if base.logical_shape(name) != update.shape:
                raise AdapterError(
                    f"{adapter.path}: the update for {name!r} is {list(update.shape)}; "
                    f"{base.source} has it as {list(base.logical_shape(name))}"
                )
            self.codes[name] = QUANTIZED_AS if base.is_quantized(name) else base.info(name).dtype
        # a quantized weight's .scales / .biases go with its codes: the adapted weight is a plain float now
        stems = [n.removesuffix(".weight") for n in self.codes if base.is_quantized(n)]
        hidden = {stem + part for stem in stems for part in (".scales", ".biases")}
        self._where = {n: f for n, f in base._where.items() if n not in hidden}

    def info(self, name: str) -> TensorInfo:
        info = super().info(name)
        if name not in self.codes:
            return info
        shape = self.base.logical_shape(name)
        return TensorInfo(name, self.codes[name], shape, info.begin, info.end, info.file)

    def fused(self, name: str) -> np.ndarray:
        """Adapted weight ``name`` in float32, before its one rounding to the dtype it is stored as."""
        w = self.base.get(name, np.float32, dequantize=True)
        return self.adapter.updates[name].apply(np.array(w, dtype=np.float32))

    def raw(self, name: str) -> np.ndarray:
        if name not in self.codes:
            return super().raw(name)
        return from_float32(self.fused(name), self.codes[name])

    def get(self, name: str, dtype: object = np.float32, *, dequantize: bool = False) -> np.ndarray:
        if name not in self.codes:
            return super().get(name, dtype, dequantize=dequantize)
        raw = self.raw(name)
        return raw if dtype is None else to_float32(raw, self.codes[name]).astype(dtype, copy=False)  # type: ignore[call-overload]

    def is_view(self, name: str, arr: np.ndarray) -> bool:
        return name not in self.codes and super().is_view(name, arr)

    def digest(self) -> str:
        """The base's identity and the adapter's: a prompt cache made without the adapter is refused with it."""
        return hashlib.sha256(f"{self.base.digest()}\0lora\0{self.adapter.digest}".encode()).hexdigest()

    def close(self) -> None:
        self.base.close()
