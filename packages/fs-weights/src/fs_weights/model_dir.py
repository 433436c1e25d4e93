"""Writing a model directory: safetensors shards (+ index), tokenizer files, all-or-nothing.

``building(out)`` yields a temporary directory beside ``out`` and renames it into place only when the block
finishes, so an interrupted write never leaves a half model where a loader would find it. Shards follow the HF
layout: one ``model.safetensors``, or ``model-0000k-of-0000n.safetensors`` plus ``model.safetensors.index.json``
when the tensors exceed ``max_bytes``.

What ``overwrite`` may replace: only a directory fs itself wrote, which ``building`` marks with ``MARKER`` (a small
JSON file). A directory of the user's - a source checkpoint, a home directory - is never deleted, overwrite or
not, and an output that is, contains or lies inside the source is refused before anything is read.
"""

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from .atomic import current_umask
from .dtypes import itemsize
from .errors import WeightsError
from .safetensors import write_safetensors

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
)
DEFAULT_SHARD_BYTES = 2 * 1024**3
MARKER = ".written-by-fs-weights.json"  # in every directory ``building`` makes: what ``overwrite`` may replace
Layout = dict[str, tuple[tuple[int, ...], str]]  # tensor name -> (shape, safetensors dtype code), in file order


def check_target(out: Path, overwrite: bool, source: Path | None = None) -> None:
    """Refuse an output that would destroy what fs did not write, before any work is done."""
    if source is not None:
        src, dst = source.resolve(), out.resolve()
        if dst == src or src in dst.parents or dst in src.parents:
            how = "is" if dst == src else "lies inside" if src in dst.parents else "contains"
            raise WeightsError(f"{out}: the output {how} the source {source}; choose a directory beside it")
    if not (out.exists() or out.is_symlink()):
        return
    if out.is_symlink() or not out.is_dir():
        raise WeightsError(f"{out}: exists and is not a directory fs wrote; remove it yourself or choose another")
    if not any(out.iterdir()):
        return
    if not overwrite:
        raise WeightsError(f"{out}: exists and is not empty (pass overwrite to replace it)")
    if not (out / MARKER).is_file():
        raise WeightsError(
            f"{out}: exists and was not written by fs-weights (no {MARKER}); overwrite replaces only what fs "
            "wrote - remove it yourself or choose another directory"
        )


@contextlib.contextmanager
def building(out: Path) -> Iterator[Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        yield tmp
        (tmp / MARKER).write_text(json.dumps({"written_by": "fs-weights"}) + "\n")
        os.chmod(tmp, 0o777 & ~current_umask())
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def counted(
    produce: Callable[[str], np.ndarray], layout: Layout, progress: Callable[[int, int], None]
) -> Callable[[str], np.ndarray]:
    """``produce`` reporting ``progress(done_bytes, total_bytes)`` after each tensor."""
    total = sum(math.prod(s) * itemsize(c) for s, c in layout.values())
    done = [0]

    def produce_counted(name: str) -> np.ndarray:
        arr = produce(name)
        done[0] += arr.nbytes
        progress(done[0], total)
        return arr

    return produce_counted


def write_shards(
    out: Path, layout: Layout, produce: Callable[[str], np.ndarray], max_bytes: int = DEFAULT_SHARD_BYTES
) -> None:
    shards: list[dict[str, tuple[tuple[int, ...], str]]] = [{}]
    size = 0
    for name, (shape, code) in layout.items():
        nbytes = math.prod(shape) * itemsize(code)
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = (shape, code)
        size += nbytes
    meta = {"format": "pt"}
    if len(shards) == 1:
        write_safetensors(out / "model.safetensors", shards[0], produce, meta)
        return
    weight_map, total = {}, 0
    for k, shard in enumerate(shards, 1):
        fname = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(out / fname, shard, produce, meta)
        for name, (shape, code) in shard.items():
            weight_map[name] = fname
            total += math.prod(shape) * itemsize(code)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def copy_tokenizer(src: Path, dst: Path) -> None:
    if src.is_file():
        src = src.parent
    if not (src / "tokenizer.json").exists():
        raise WeightsError(f"{src}: no tokenizer.json to copy into the checkpoint")
    for f in TOKENIZER_FILES:
        if (src / f).exists():
            shutil.copyfile(src / f, dst / f)
