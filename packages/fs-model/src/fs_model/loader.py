"""``load_model``: config -> supported? -> cross-check -> the backend's ``from_checkpoint``.

Backend-neutral: every refusal about the files happens here, before any compute; what a weight becomes in memory
is the chosen backend's business (``fs_model.numpy.build``, ``fs_model.mlx.model``).
"""

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fs_weights import (
    Checkpoint,
    GenerationConfig,
    Qwen3Config,
    WeightsError,
    cross_check,
    load_config,
    load_generation_config,
)
from fs_weights.adapted import AdaptedCheckpoint
from fs_weights.adapter import load_adapter
from fs_weights.gguf_file import open_gguf

from . import rope_scaling
from .errors import ModelError
from .model import Model

# backend -> the module whose from_checkpoint builds it (imported only when chosen: mlx is optional)
BUILDERS = {"numpy": "fs_model.numpy.build", "mlx": "fs_model.mlx"}
BACKENDS = tuple(BUILDERS)


def check_supported(c: Qwen3Config) -> None:
    """Refuse configs whose math this implementation does not do, naming the key."""
    rope_scaling.check(c)
    if c.use_sliding_window:
        raise ModelError(f"{c.source}: use_sliding_window=true is not implemented")
    if c.attention_bias:
        raise ModelError(f"{c.source}: attention_bias=true is not part of Qwen3 and is not implemented")
    if c.hidden_act != "silu":
        raise ModelError(f"{c.source}: hidden_act {c.hidden_act!r} is not implemented (only silu)")
    if c.dim_head % 2:
        raise ModelError(f"{c.source}: head_dim {c.dim_head} must be even for rotary embedding")


def load_model(
    path: str | os.PathLike[str],
    *,
    backend: str = "numpy",
    dtype: str | None = None,
    quantize: str | None = None,
    kv_dtype: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    tensor_group: Any = None,
    adapter_path: str | os.PathLike[str] | None = None,
) -> Model:
    """``path`` is a model directory, or a llama.cpp ``.gguf`` file (F32/F16/BF16 tensors, and Q8_0, Q4_0, Q4_1,
    Q4_K, Q5_0, Q5_1, Q5_K, Q6_K ones repacked exactly as MLX affine codes: fs_weights.gguf_blocks).

    numpy backend (always computes in float32): ``dtype=None``/``"native"`` keeps matrices as stored, as mlx-lm
    does (bf16 stays bf16 bits, an MLX 4/8-bit checkpoint stays quantized, float32 stays float32) and runs them
    on the CPU kernels (numba, a dependency where it has wheels); ``"float32"`` holds float32 copies - the
    readable BLAS reference; ``"bfloat16"`` keeps matrices as bf16 bits whatever they are stored as;
    ``quantize="int8"|"int4"`` quantizes float matrices at load (MLX's affine format, group 64, lm_head
    included). ``kv_dtype`` ("float32" or "bfloat16") is what the KV cache holds; by default bfloat16 when the
    matrices are kept in bf16 or quantized (as mlx-lm's caches follow the model's dtype), else float32.
    MLX backend: ``dtype`` is the compute dtype ("float32", "bfloat16", "float16"; default: the checkpoint's).
    ``tensor_group`` (MLX only, an ``mx.distributed`` group): tensor parallelism, each rank loading its slice.
    ``adapter_path``: a LoRA adapter directory (mlx-lm's or PEFT's), fused into the weights it names as they load
    (``fs_weights.adapted``: float weights keep their dtype, quantized ones become bf16), on either backend.
    ``progress(done, total)`` is called as each weight is loaded, in bytes of the stored tensors (a quantized
    weight's scales and biases included), so a bar can show bytes and an ETA."""
    p = Path(path)
    if backend not in BACKENDS:
        raise ModelError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    gguf = p.is_file() and p.suffix == ".gguf"
    if not p.is_dir() and not gguf:
        raise ModelError(f"{p}: not a model directory (nor a .gguf file)")
    try:
        if gguf:  # config and EOS set from the file's metadata
            ckpt, raw, eos = open_gguf(p)
            config = Qwen3Config.from_dict(raw, source=str(p))
            generation: GenerationConfig | None = GenerationConfig(eos_token_id=tuple(eos))
        else:
            config = load_config(p)
            ckpt = Checkpoint.open(p)
            generation = load_generation_config(p)
        if ckpt.headless and not config.tie_word_embeddings:  # Qwen3Model (an embedding checkpoint) has no head:
            config = config.replace(tie_word_embeddings=True)  # the embedding matrix stands in; logits unused
        check_supported(config)
        config = config.replace(max_position_embeddings=rope_scaling.context(config))  # YaRN serves factor x L
        cross_check(config, ckpt, strict=True)
        if adapter_path is not None:  # checked against these weights before anything is computed
            ckpt = AdaptedCheckpoint(ckpt, load_adapter(adapter_path))
        digest = ckpt.digest()
    except WeightsError as e:
        raise ModelError(str(e)) from None
    module = importlib.import_module(BUILDERS[backend])
    extra = {} if tensor_group is None else {"tensor_group": tensor_group}
    if tensor_group is not None and backend != "mlx":
        raise ModelError("tensor_group= (tensor parallelism over mx.distributed) needs backend='mlx'")
    model: Model = module.from_checkpoint(
        config, ckpt, str(p), dtype=dtype, quantize=quantize, kv_dtype=kv_dtype, progress=progress, **extra
    )
    model.weights_digest = digest
    if generation is not None:  # read once, here: the EOS set generation stops on (Model.eos_token_ids)
        model.eos_token_ids = model.eos_token_ids | frozenset(generation.eos_token_id)
    return model
