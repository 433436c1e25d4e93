"""``load_model``: config -> cross-check -> supported? -> weights -> backend. Every refusal happens before compute."""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fs_weights import Checkpoint, Qwen3Config, WeightsError, cross_check, f32_to_bf16, load_config

from .errors import ModelError
from .model import Model

BACKENDS = ("numpy", "mlx")


def check_supported(c: Qwen3Config) -> None:
    """Refuse configs whose math this implementation does not do, naming the key."""
    if c.rope_scaling:
        raise ModelError(f"{c.source}: rope_scaling {c.rope_scaling!r} is not implemented")
    if c.use_sliding_window:
        raise ModelError(f"{c.source}: use_sliding_window=true is not implemented")
    if c.attention_bias:
        raise ModelError(f"{c.source}: attention_bias=true is not part of Qwen3 and is not implemented")
    if c.hidden_act != "silu":
        raise ModelError(f"{c.source}: hidden_act {c.hidden_act!r} is not implemented (only silu)")
    if c.dim_head % 2:
        raise ModelError(f"{c.source}: head_dim {c.dim_head} must be even for rotary embedding")
    for key in ("num_experts", "moe_intermediate_size"):
        if key in c.extra:
            raise ModelError(f"{c.source}: {key!r} present: mixture-of-experts checkpoints are not supported")


def load_model(
    path: str | os.PathLike[str],
    *,
    backend: str = "numpy",
    dtype: str | None = None,
    quantize: str | None = None,
    kv_dtype: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Model:
    """``path`` is a model directory.

    numpy backend (always computes in float32): ``dtype=None``/``"float32"`` holds float32 weights - the readable
    reference; ``"bfloat16"`` keeps matrices as bf16 bits; ``"native"`` keeps them as stored (bf16 stays bf16, an
    MLX 4/8-bit checkpoint stays quantized); ``quantize="int8"|"int4"`` quantizes float matrices at load (MLX's
    affine format, group 64, lm_head included). Kept and quantized weights run on ``fs-model[fast]`` kernels.
    ``kv_dtype`` ("float32" or "bfloat16") is what the KV cache holds; by default bfloat16 when the matrices are
    kept in bf16 or quantized (as mlx-lm's caches follow the model's dtype), float32 for the float32 reference.
    MLX backend: ``dtype`` is the compute dtype ("float32", "bfloat16", "float16"; default: the checkpoint's).
    ``progress(done, total)`` is called as tensors are loaded."""
    p = Path(path)
    if backend not in BACKENDS:
        raise ModelError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if not p.is_dir():
        raise ModelError(f"{p}: not a model directory")
    try:
        config = load_config(p)
        check_supported(config)
        ckpt = Checkpoint.open(p)
        cross_check(config, ckpt, strict=True)
    except WeightsError as e:
        raise ModelError(str(e)) from None
    if backend == "numpy":
        if dtype not in (None, "float32", "bfloat16", "native"):
            raise ModelError(f"numpy backend weights: dtype must be float32, bfloat16 or native, not {dtype!r}")
        if quantize not in (None, "int8", "int4"):
            raise ModelError(f"quantize must be int8 or int4, not {quantize!r}")
        if kv_dtype is None:
            kv_dtype = "float32" if dtype in (None, "float32") and quantize is None else "bfloat16"
        from .numpy import NumpyModel

        names = [n for n in ckpt.names() if not n.endswith((".scales", ".biases"))]
        weights = {}
        for i, n in enumerate(names, 1):
            weights[n] = _numpy_weight(ckpt, n, dtype, quantize)
            if progress is not None:
                progress(i, len(names))
        return NumpyModel(config, weights, str(p), kv_dtype=kv_dtype)
    if quantize is not None:
        raise ModelError("quantize= applies to the numpy backend; for MLX use an MLX-quantized checkpoint")
    if kv_dtype is not None:
        raise ModelError("kv_dtype= applies to the numpy backend; MLX caches hold the compute dtype")
    from .mlx import MlxModel

    return MlxModel.from_checkpoint(config, ckpt, dtype, str(p), progress)


def _numpy_weight(ckpt: Checkpoint, name: str, dtype: str | None, quantize: str | None) -> Any:
    w = _numpy_weight_as_kept(ckpt, name, dtype, quantize)
    if not np.may_share_memory(getattr(w, "codes", w), ckpt.raw(name)):
        ckpt.release(name)  # a converted copy is kept: the stored pages need not stay resident (peak RSS)
    return w


def _numpy_weight_as_kept(ckpt: Checkpoint, name: str, dtype: str | None, quantize: str | None) -> Any:
    if len(ckpt.info(name).shape) != 2:  # norms: tiny, always float32
        return _float32(ckpt, name)
    from .numpy.quantized import from_mlx, quantize_affine

    if ckpt.is_quantized(name) and (dtype == "native" or quantize is not None):
        bits, group = ckpt.quant_params(name)
        base = name.removesuffix(".weight")
        if bits in (4, 8):
            return from_mlx(ckpt.raw(name), ckpt.get(base + ".scales"), ckpt.get(base + ".biases"), bits, group)
    if quantize is not None:
        stored = ckpt.raw(name) if ckpt.info(name).dtype in ("BF16", "F32") and not ckpt.is_quantized(name) else None
        w = stored if stored is not None else ckpt.get(name, np.float32, dequantize=True)
        return quantize_affine(w, bits=8 if quantize == "int8" else 4)
    if dtype == "bfloat16" or (dtype == "native" and ckpt.info(name).dtype == "BF16"):
        return _bf16(ckpt, name)
    return _float32(ckpt, name)


def _bf16(ckpt: Checkpoint, name: str) -> np.ndarray:
    """Matrices as bf16 bit patterns: a BF16 tensor is the read-only mmap view itself (no copy, 2 bytes/param)."""
    if ckpt.info(name).dtype == "BF16":
        return ckpt.raw(name)
    return f32_to_bf16(ckpt.get(name, np.float32, dequantize=True))


def _float32(ckpt: Checkpoint, name: str) -> np.ndarray:
    """Weights as contiguous float32 in memory (quantized ones dequantized once, at load)."""
    return np.ascontiguousarray(ckpt.get(name, np.float32, dequantize=True))
