"""``fs-weights convert``: a Qwen3 checkpoint -> an MLX-layout model directory, in another dtype or quantized.

What it writes is what ``mlx_lm.convert`` writes for the same source, tensor for tensor: the float tensors cast
to ``dtype``; with ``quantize`` every Linear and the embedding in mlx's affine layout (``weight`` uint32 packed
codes, ``scales`` and ``biases`` in ``dtype``), computed by ``quantize.quantize`` (mlx's own rule, bit for bit)
from the weight as ``dtype`` holds it; a tied ``lm_head`` dropped; ``config.json`` with ``quantization``
``{group_size, bits, mode}``; the tokenizer and generation config copied. The directory appears all at once.

A quantized source is dequantized (to write a float model); quantizing it again is refused - a second rounding
of already-rounded weights is not what anyone converting a model wants.
"""

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .adapted import AdaptedCheckpoint
from .adapter import Adapter
from .checkpoint import Checkpoint
from .config import Qwen3Config
from .crosscheck import (
    cross_check,
    expected_tensors,
    is_quantizable,
    quantization_entry,
    quantized_as,
    stored_tensors,
)
from .dtypes import FLOATS, code_for, from_float32, to_float32
from .errors import WeightsError
from .jsonfile import read_json
from .model_dir import DEFAULT_SHARD_BYTES, building, check_target, copy_tokenizer, counted, write_shards
from .quantize import quantize as quantize_weight

DTYPE_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def convert_checkpoint(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    dtype: str | None = None,
    quantize: int | None = None,
    group_size: int = 64,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
    adapter: Adapter | None = None,
) -> Path:
    """Write ``src`` (a model directory) to ``out``; ``dtype`` defaults to the source's float dtype. ``adapter``
    (``fs-weights fuse --dequantize``): its updates applied to the weights it names before they are written."""
    src_dir, target = Path(src), Path(out)
    check_target(target, overwrite, source=src_dir)
    raw = read_json(src_dir / "config.json")
    if not isinstance(raw, dict):
        raise WeightsError(f"{src_dir / 'config.json'}: must be a JSON object")
    config = Qwen3Config.from_dict(raw, source=str(src_dir / "config.json"))
    with Checkpoint.open(src_dir) as ckpt:
        report = cross_check(config, ckpt)
        if not report.ok:
            raise WeightsError(f"{src_dir}: the weights do not match config.json: {report.problems(1)[0]}")
        if adapter is not None:
            ckpt = AdaptedCheckpoint(ckpt, adapter)
        if quantize and ckpt.quantization:
            raise WeightsError(
                f"{src_dir}: already quantized ({ckpt.quantization.get('bits')}-bit); convert from the float "
                "checkpoint instead, or drop --quantize to write a dequantized float model"
            )
        name = dtype or _source_dtype(raw, ckpt)
        try:
            code = code_for(name)
        except KeyError:
            raise WeightsError(f"dtype {name!r} is not one of float32, float16, bfloat16") from None
        cfg = {k: v for k, v in raw.items() if k not in ("quantization", "quantization_config")} | {"torch_dtype": name}
        if "dtype" in raw:  # newer transformers' name for torch_dtype
            cfg["dtype"] = name
        if quantize:
            cfg["quantization"] = quantization_entry(config, quantize, group_size) | {"mode": "affine"}
            cfg["quantization_config"] = cfg["quantization"]  # mlx-lm writes both names
        cfg_obj = Qwen3Config.from_dict(cfg, source=f"{target / 'config.json'}")
        layout = {n: (s, d or code) for n, (s, d) in stored_tensors(cfg_obj, quantize, group_size).items()}
        produce = _producer(ckpt, cfg_obj, code, quantize, group_size)
        if progress is not None:
            produce = counted(produce, layout, progress)
        with building(target) as tmp:
            write_shards(tmp, layout, produce, max_shard_bytes)
            (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
            if (src_dir / "generation_config.json").is_file():
                (tmp / "generation_config.json").write_bytes((src_dir / "generation_config.json").read_bytes())
            if (src_dir / "tokenizer.json").is_file():
                copy_tokenizer(src_dir, tmp)
    return target


def _source_dtype(raw: dict[str, Any], ckpt: Checkpoint) -> str:
    """config.json's ``torch_dtype`` (or ``dtype``), else the stored dtype of the first float tensor."""
    for key in ("torch_dtype", "dtype"):
        if raw.get(key) in DTYPE_NAMES.values():
            return str(raw[key])
    for n in ckpt.names():
        if ckpt.info(n).dtype in FLOATS:
            return DTYPE_NAMES.get(ckpt.info(n).dtype, "float32")
    return "float32"


def _producer(ckpt: Checkpoint, c: Qwen3Config, code: str, bits: int | None, group: int) -> Callable[[str], np.ndarray]:
    logical = expected_tensors(c)
    done: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def as_stored(name: str) -> np.ndarray:
        """The source tensor as float32 values that ``code`` holds exactly (what mlx-lm's cast gives)."""
        w = ckpt.get(name, dequantize=True)
        ckpt.release(name)
        return to_float32(from_float32(w, code), code)

    def produce(name: str) -> np.ndarray:
        if name in logical and not (bits and is_quantizable(name, logical[name])):
            return from_float32(as_stored(name), code)
        base, part = name.rsplit(".", 1)
        if base not in done:  # weight, scales and biases are written next to each other
            done.clear()
            b, g = quantized_as(base + ".weight", bits or 0, group)
            done[base] = quantize_weight(as_stored(base + ".weight"), bits=b, group_size=g)
        packed, scales, biases = done[base]
        return {"weight": packed, "scales": from_float32(scales, code), "biases": from_float32(biases, code)}[part]

    return produce
