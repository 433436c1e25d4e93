"""``fs-weights fuse``: a model directory plus a LoRA adapter -> the fused model directory, as ``mlx_lm.fuse``.

The output has the base's layout tensor for tensor: the weights the adapter names are replaced by
``W + scale · B @ A`` (``fs_weights.adapter``; DoRA's row rescale included), everything else is copied byte for
byte, and config.json, generation_config.json and the tokenizer files are copied. A quantized base stays quantized
as mlx_lm.fuse keeps it: each adapted weight is dequantized, updated, rounded to its scales' dtype and quantized
again with its own bits and group size (MLX's rule, ``quantize.quantize``); ``dequantize=True`` writes a float
model instead (``fs-weights convert``'s dequantization of every weight, with the adapter applied). The update is
computed in float32 and rounded once, where mlx_lm.fuse rounds the update to the weight's dtype before adding it:
an element can differ from mlx_lm.fuse's by one unit in the last place of that dtype.
"""

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .adapted import AdaptedCheckpoint
from .adapter import load_adapter
from .checkpoint import Checkpoint
from .config import load_config
from .convert import convert_checkpoint
from .crosscheck import cross_check
from .dtypes import from_float32, to_float32
from .errors import WeightsError
from .model_dir import DEFAULT_SHARD_BYTES, Layout, building, check_target, copy_tokenizer, counted, write_shards
from .quantize import quantize

COPIED = ("config.json", "generation_config.json")


def fuse_adapter(
    model: str | os.PathLike[str],
    adapter_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    dequantize: bool = False,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    src, target = Path(model), Path(out)
    if src.suffix == ".gguf" or not src.is_dir():
        raise WeightsError(f"{src}: fuse takes a model directory (safetensors); a GGUF file is adapted at load instead")
    adapter = load_adapter(adapter_path)
    check_target(target, overwrite, source=src)
    check_target(target, overwrite, source=adapter.path)
    if dequantize:
        return convert_checkpoint(
            src, target, adapter=adapter, max_shard_bytes=max_shard_bytes, overwrite=overwrite, progress=progress
        )
    config = load_config(src)
    with Checkpoint.open(src) as base:
        report = cross_check(config, base)
        if not report.ok:
            raise WeightsError(f"{src}: the weights do not match config.json: {report.problems(1)[0]}")
        adapted = AdaptedCheckpoint(base, adapter)  # refuses an adapter for another model, before any write
        layout: Layout = {n: (base.info(n).shape, base.info(n).dtype) for n in base.names()}
        produce = _producer(base, adapted)
        if progress is not None:
            produce = counted(produce, layout, progress)
        with building(target) as tmp:
            write_shards(tmp, layout, produce, max_shard_bytes)
            for f in COPIED:
                if (src / f).is_file():
                    shutil.copyfile(src / f, tmp / f)
            if (src / "tokenizer.json").is_file():
                copy_tokenizer(src, tmp)
    return target


def _producer(base: Checkpoint, adapted: AdaptedCheckpoint) -> Callable[[str], np.ndarray]:
    done: dict[str, dict[str, np.ndarray]] = {}

    def produce(name: str) -> np.ndarray:
        stem, part = name.rsplit(".", 1)
        weight = stem + ".weight"
        if weight not in adapted.codes:
            return base.raw(name)
        if not base.is_quantized(weight):
            return adapted.raw(weight)  # the float weight in its own dtype, updated
        if stem not in done:  # weight, scales and biases are written next to each other
            done.clear()
            code = base.info(stem + ".scales").dtype
            bits, group = base.quant_params(weight)
            w = to_float32(from_float32(adapted.fused(weight), code), code)  # the fused weight as its dtype holds it
            packed, scales, biases = quantize(w, bits=bits, group_size=group)
            done[stem] = {"weight": packed, "scales": from_float32(scales, code), "biases": from_float32(biases, code)}
        return done[stem][part]

    return produce
