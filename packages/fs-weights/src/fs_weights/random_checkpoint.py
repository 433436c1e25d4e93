"""Random-weight Qwen3 checkpoints in the exact HF (or MLX-quantized) directory layout.

Real weights cannot be downloaded everywhere, so correctness is proven on checkpoints this module writes.
Every tensor is drawn from its own generator seeded by (seed, crc32(name)), so the values do not depend on
sharding, dtype order or which other tensors exist.
"""

import json
import math
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import byte_tokenizer
from .config import Qwen3Config
from .crosscheck import expected_tensors, is_quantizable, quantization_entry, quantized_as, stored_tensors
from .dtypes import code_for, from_float32
from .errors import WeightsError
from .model_dir import DEFAULT_SHARD_BYTES, building, check_target, copy_tokenizer, counted, write_shards
from .quantize import quantize

PRESETS: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": dict(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        bos_token_id=151643,
        eos_token_id=151645,
    ),
    "tiny": dict(
        vocab_size=151936,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        bos_token_id=151643,
        eos_token_id=151645,
    ),
}
GENERATION_SAMPLING = {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95}  # Qwen3's defaults


def preset(name: str, **overrides: Any) -> Qwen3Config:
    if name not in PRESETS:
        raise WeightsError(f"unknown preset {name!r} (choose from {', '.join(PRESETS)})")
    moe = overrides.get("model_type") == "qwen3_moe"
    arch = ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"]
    return Qwen3Config.from_dict(
        {"architectures": arch, "model_type": "qwen3", **PRESETS[name], **overrides}, source=f"preset {name}"
    )


def random_tensor(name: str, shape: tuple[int, ...], config: Qwen3Config, seed: int) -> np.ndarray:
    """float32 values; the scales keep a random model's logits varied rather than degenerate."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if len(shape) == 1:  # norm weights: around 1, not exactly 1, so a dropped norm is detectable
        return (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    if name.endswith("embed_tokens.weight"):  # std 1/sqrt(H): with tied embeddings the echo of the input
        # token (|E[t]|² / rms(x) ~ 1 / rms(x)) stays below the spread of the other logits (std ~1)
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(1 / math.sqrt(shape[1]))
    fan_in = shape[-1]
    gain = 2.0 if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(gain / math.sqrt(fan_in))


def write_random_checkpoint(
    path: str | os.PathLike[str],
    config: Qwen3Config,
    *,
    seed: int = 0,
    dtype: str = "bfloat16",
    quantize: int | None = None,
    group_size: int = 64,
    tokenizer: str | os.PathLike[str] | None = None,  # a directory to copy from, or "bytes"
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write a complete model directory at ``path`` (atomically: built beside it, then renamed). ``progress(done,
    total)`` is called as each tensor is made, in bytes (Qwen3-0.6B's shapes take seconds)."""
    out = Path(path)
    try:
        code = code_for(dtype)
    except KeyError:
        raise WeightsError(f"dtype {dtype!r} is not one of float32, float16, bfloat16") from None
    check_target(out, overwrite)
    if tokenizer == "bytes":
        if config.vocab_size < byte_tokenizer.VOCAB_SIZE:
            raise WeightsError(
                f"vocab_size {config.vocab_size} is too small for the byte tokenizer ({byte_tokenizer.VOCAB_SIZE} ids)"
            )
        config = config.replace(bos_token_id=byte_tokenizer.ENDOFTEXT, eos_token_id=byte_tokenizer.IM_END)
    cfg = config.to_dict() | {"torch_dtype": dtype}
    if quantize:
        cfg["quantization"] = quantization_entry(config, quantize, group_size)
    cfg_obj = Qwen3Config.from_dict(cfg, source=str(out / "config.json"))  # validate before any work
    layout = {n: (s, d or code) for n, (s, d) in stored_tensors(cfg_obj, quantize, group_size).items()}
    with building(out) as tmp:
        produce = _producer(cfg_obj, seed, code, quantize, group_size)
        if progress is not None:
            produce = counted(produce, layout, progress)
        write_shards(tmp, layout, produce, max_shard_bytes)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        (tmp / "generation_config.json").write_text(json.dumps(_generation_config(cfg_obj), indent=2) + "\n")
        if tokenizer == "bytes":
            byte_tokenizer.write_byte_tokenizer(tmp)
        elif tokenizer is not None:
            copy_tokenizer(Path(tokenizer), tmp)
    return out


def _producer(c: Qwen3Config, seed: int, code: str, bits: int | None, group: int):
    logical = expected_tensors(c)
    cached: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def produce(name: str) -> np.ndarray:
        if name in logical and not (bits and is_quantizable(name, logical[name])):
            return from_float32(random_tensor(name, logical[name], c, seed), code)
        base = name.rsplit(".", 1)[0]
        if base not in cached:  # weight, scales and biases are written next to each other
            cached.clear()
            b, g = quantized_as(base + ".weight", bits or 0, group)
            cached[base] = quantize(
                random_tensor(base + ".weight", logical[base + ".weight"], c, seed), bits=b, group_size=g
            )
        packed, scales, biases = cached[base]
        return {"weight": packed, "scales": from_float32(scales, code), "biases": from_float32(biases, code)}[
            name.rsplit(".", 1)[1]
        ]

    return produce


def _generation_config(c: Qwen3Config) -> dict[str, Any]:
    """Qwen3's layout: EOS = <|im_end|> and <|endoftext|> (the config's eos and bos ids), pad = <|endoftext|>."""
    eos = c.eos_token_id if isinstance(c.eos_token_id, list) else [c.eos_token_id] if c.eos_token_id is not None else []
    ids: dict[str, Any] = {
        "eos_token_id": list(dict.fromkeys([*eos, *([c.bos_token_id] if c.bos_token_id is not None else [])]))
    }
    if c.bos_token_id is not None:
        ids |= {"bos_token_id": c.bos_token_id, "pad_token_id": c.bos_token_id}
    return ids | GENERATION_SAMPLING
