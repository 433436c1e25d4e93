"""A checkpoint: one or more safetensors files behind one name -> tensor map, read lazily.

``Checkpoint.open`` accepts a model directory, a single ``.safetensors`` file, a sharded
``model.safetensors.index.json``, or a llama.cpp ``.gguf`` file (``gguf_file``). Headers are parsed up front
(cheap); bytes are mapped on first access, so reading one layer of a multi-GB checkpoint touches only that
layer's pages.
"""

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .config import check_quantization
from .dtypes import FLOATS, to_float32
from .errors import ConfigError, SafetensorsError, WeightsError
from .finite import check_finite
from .jsonfile import read_json
from .quantize import dequantize as _dequantize
from .safetensors import SafetensorsFile, TensorInfo

INDEX = "model.safetensors.index.json"
# mlx-lm's Qwen3-MoE layout (what mlx-community's conversions hold): each layer's experts stacked [E, out, in]
STACKED = re.compile(r"(.+\.mlp)\.switch_mlp\.(gate_proj|up_proj|down_proj)\.(weight|scales|biases)$")
DIGEST_SAMPLES, DIGEST_SLICE = 16, 4096


class Checkpoint:
    def __init__(self, files: list[SafetensorsFile], source: Path, quantization: dict[str, Any] | None = None):
        self.source = source
        self.files = files
        self.quantization = quantization
        self._where: dict[str, SafetensorsFile] = {}
        self._finite: set[str] = set()  # tensors already scanned for NaN / Inf (finite.py)
        self._stored: dict[str, str] = {}  # fs's name -> the name in the file, where they differ (headless)
        for f in files:
            for name in f.tensors:
                if name in self._where:
                    raise SafetensorsError(f"tensor {name!r} appears in both {self._where[name].path} and {f.path}")
                self._where[name] = f
        # a headless checkpoint (transformers' Qwen3Model, as Qwen3-Embedding ships): "embed_tokens.weight",
        # "layers.N....", "norm.weight" with no "model." prefix and no lm_head; read under the causal LM's names
        self.headless = "embed_tokens.weight" in self._where and not any(n.startswith("model.") for n in self._where)
        if self.headless:
            self._stored = {"model." + n: n for n in self._where}
            self._where = {"model." + n: f for n, f in self._where.items()}
        self._experts: dict[str, tuple[str, str, int]] = {}  # per-expert name -> (stacked name, stored name, e)
        self._unstack_experts()

    def _unstack_experts(self) -> None:
        """mlx-lm's stacked experts (``mlp.switch_mlp.gate_proj.weight`` [E, out, in], and its ``.scales`` /
        ``.biases``) read under transformers' per-expert names (``mlp.experts.{e}.gate_proj.weight`` [out, in]):
        each expert is a view of its slice of the stacked tensor, so both layouts load the same way."""
        for name in [n for n in self._where if STACKED.match(n)]:
            f, stored = self._where.pop(name), self._stored.pop(name, name)
            shape = f.tensors[stored].shape
            if len(shape) != 3:
                raise WeightsError(f"{f.path}: tensor {stored!r} is {list(shape)}; stacked experts are [E, out, in]")
            m = STACKED.match(name)
            assert m is not None
            for e in range(shape[0]):
                alias = f"{m[1]}.experts.{e}.{m[2]}.{m[3]}"
                self._where[alias] = f
                self._experts[alias] = (name, stored, e)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "Checkpoint":
        p = Path(path)
        if not p.exists():
            raise WeightsError(f"{p}: no such file or directory")
        if p.is_file() and p.suffix == ".gguf":
            from .gguf_file import open_gguf

            return open_gguf(p)[0]
        quant = _quantization(p.parent if p.is_file() else p)
        if p.is_dir():
            if (p / INDEX).exists():
                return cls(_shards(p / INDEX), p, quant)
            found = sorted(p.glob("*.safetensors"))
            if not found:
                raise WeightsError(f"{p}: no *.safetensors files and no {INDEX}")
            return cls([SafetensorsFile(f) for f in found], p, quant)
        if p.name.endswith(".json"):
            return cls(_shards(p), p, quant)
        return cls([SafetensorsFile(p)], p, quant)

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the mappings; arrays already handed out keep theirs alive until they are freed."""
        for f in self.files:
            f.close()

    def names(self) -> list[str]:
        return sorted(self._where, key=natural_key)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._where)

    def info(self, name: str) -> TensorInfo:
        if name in self._experts:  # one expert's slice of a stacked tensor: its own shape and byte range
            _, stored, e = self._experts[name]
            t = self._file(name).tensors[stored]
            per = t.nbytes // t.shape[0]
            return TensorInfo(name, t.dtype, t.shape[1:], t.begin + e * per, t.begin + (e + 1) * per, t.file)
        return self._file(name).tensors[self._stored.get(name, name)]

    def raw(self, name: str) -> np.ndarray:
        """The stored array without conversion (read-only, mmap-backed; BF16 as uint16 bits). A float tensor is
        scanned for NaN / Inf the first time it is read, and refused by name if it holds one (``finite.py``)."""
        f, stored = self._file(name), self._stored.get(name, name)
        if name in self._experts:  # a GGUF file repacks only that expert's blocks; safetensors slices its map
            _, stored, e = self._experts[name]
            expert = getattr(f, "raw_expert", None)
            arr = expert(stored, e) if expert is not None else f.raw(stored)[e]
        else:
            arr = f.raw(stored)
        if name not in self._finite:
            where = f"{stored!r}" if name not in self._experts else f"{stored!r} (expert {self._experts[name][2]})"
            check_finite(arr, f.tensors[stored].dtype, f"{f.path}: tensor {where}")
            self._finite.add(name)
        return arr

    def superblocks(self, name: str) -> tuple[str, np.ndarray] | None:
        """(layout, records) where quantized ``name`` is a GGUF K-quant matrix (``gguf_blocks``: the per-256-weight
        factors of its scales and biases, which kernels can read instead of ``.scales`` / ``.biases``), else None."""
        if name in self._experts or not self.is_quantized(name):
            return None
        read = getattr(self._file(name), "superblocks", None)
        return read(self._stored.get(name, name)) if read is not None else None

    def code_bits(self, name: str) -> int | None:
        """The bits quantized ``name``'s codes hold in the file where fewer than ``quant_params`` says (GGUF's 5- and
        6-bit types, repacked as 8-bit codes), so a loader may keep them in those bits; else None."""
        if not self.is_quantized(name):
            return None
        stored = self._experts[name][1] if name in self._experts else self._stored.get(name, name)
        read = getattr(self._file(name), "code_bits", None)
        return read(stored) if read is not None else None

    def is_view(self, name: str, arr: np.ndarray) -> bool:
        """Whether ``arr`` (what a loader kept for ``name``) reads the mapped file itself: then its pages are the
        weights and must stay; a converted copy does not, and ``release`` can drop them. Costs no read or repack."""
        f, stored = self._file(name), self._stored.get(name, name)
        if name in self._experts:
            stored = self._experts[name][1]
        return bool(np.may_share_memory(arr, f.stored_bytes(stored)))

    def release(self, name: str) -> None:
        """Drop ``name``'s mapped pages from resident memory once a converted copy is all that is kept."""
        if name in self._experts:  # only this expert's slice: the stacked tensor's others may still be read
            _, stored, e = self._experts[name]
            self._file(name).release(stored, e)
            return
        self._file(name).release(self._stored.get(name, name))

    def get(self, name: str, dtype: Any = np.float32, *, dequantize: bool = False) -> np.ndarray:
        """Float tensors as ``dtype`` (float32 by default; ``None`` returns the stored array). Integer
        tensors are returned as stored. ``dequantize=True`` on a quantized ``.weight`` returns the float
        weight from its ``.weight``/``.scales``/``.biases`` triple."""
        if dequantize and self.is_quantized(name):
            bits, group = self.quant_params(name)
            base = name.removesuffix(".weight")
            w = _dequantize(
                self.raw(name), self.get(base + ".scales"), self.get(base + ".biases"), bits=bits, group_size=group
            )
            return w if dtype is None else w.astype(dtype, copy=False)
        info, arr = self.info(name), self.raw(name)
        if dtype is None or info.dtype not in FLOATS:
            return arr
        return to_float32(arr, info.dtype).astype(dtype, copy=False)

    def is_quantized(self, name: str) -> bool:
        return name.endswith(".weight") and name.removesuffix(".weight") + ".scales" in self._where

    def logical_shape(self, name: str) -> tuple[int, ...]:
        """``name``'s shape as the model has it: a quantized weight's packed uint32 columns unpacked."""
        shape = self.info(name).shape
        if not self.is_quantized(name):
            return shape
        return (*shape[:-1], shape[-1] * 32 // self.quant_params(name)[0])

    def weight_nbytes(self, name: str) -> int:
        """Stored bytes of ``name`` with its quantization companions (``.scales``, ``.biases``) when it has them:
        what loading that one weight reads, the unit of a loader's progress."""
        base = name.removesuffix(".weight")
        parts = [name] + ([base + ".scales", base + ".biases"] if self.is_quantized(name) else [])
        return sum(self.info(p).nbytes for p in parts if p in self._where)

    def quant_params(self, name: str) -> tuple[int, int]:
        """(bits, group_size) for quantized ``name``, honouring mlx's per-module overrides in config."""
        q = self.quantization
        if not q:
            raise WeightsError(f"tensor {name!r} has .scales but config.json has no 'quantization' entry")
        stacked = self._experts.get(name, (name,))[0]  # mlx-lm names the stacked module in per-module entries
        own = q.get(name.removesuffix(".weight"), q.get(stacked.removesuffix(".weight")))
        q = own if isinstance(own, dict) else q
        return int(q["bits"]), int(q["group_size"])

    def _file(self, name: str) -> SafetensorsFile:
        try:
            return self._where[name]
        except KeyError:
            raise WeightsError(f"{self.source}: no tensor named {name!r}") from None

    def digest(self) -> str:
        """SHA-256 identifying these weights: every tensor's name, dtype and shape, plus ``DIGEST_SAMPLES`` slices
        of 4 KiB spread evenly through its bytes (all of it when smaller). On Qwen3-0.6B shapes that reads ~20 MiB
        and takes 30 ms here, cheap enough to compute at every load (a full hash of 1.2 GB takes seconds); two
        checkpoints with the same shapes and other values (another seed, a fine-tune) differ in every slice.
        A change confined to bytes no
        slice covers is not seen: this guards against using the wrong file, not against a forger."""
        h = hashlib.sha256()
        for name in self.names():
            t = self.info(name)
            h.update(f"{name}\0{t.dtype}\0{t.shape}\0".encode("utf-8", "surrogatepass"))
            raw = (
                self.raw(name).reshape(-1).view(np.uint8)
                if name in self._experts
                else self._file(name).stored_bytes(self._stored.get(name, name))
            )
            if raw.size <= DIGEST_SAMPLES * DIGEST_SLICE:
                h.update(raw.tobytes())
                continue
            for start in np.linspace(0, raw.size - DIGEST_SLICE, DIGEST_SAMPLES).astype(np.int64):
                h.update(raw[start : start + DIGEST_SLICE].tobytes())
        return h.hexdigest()

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for f in self.files for t in f.tensors.values())


def _shards(index: Path) -> list[SafetensorsFile]:
    data = read_json(index, SafetensorsError)
    wmap = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wmap, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wmap.items()):
        raise SafetensorsError(f"{index}: 'weight_map' must be an object of tensor name to shard file name")
    files: dict[str, SafetensorsFile] = {}
    for name, shard in wmap.items():
        shard_path = index.parent / shard
        if not shard or "\0" in shard or shard in (".", "..") or Path(shard).name != shard:
            raise SafetensorsError(f"{index}: shard {shard!r} for tensor {name!r} is not a plain file name")
        if shard not in files:
            if not shard_path.exists():
                raise SafetensorsError(f"{index}: shard {shard!r} (holding tensor {name!r}) does not exist")
            files[shard] = SafetensorsFile(shard_path)
        if name not in files[shard]:
            raise SafetensorsError(f"{index}: names tensor {name!r} in shard {shard!r}, which has no such tensor")
    return list(files.values())


def _quantization(model_dir: Path) -> dict[str, Any] | None:
    cfg = model_dir / "config.json"
    if not cfg.exists():
        return None
    d = read_json(cfg, ConfigError)
    q = d.get("quantization") if isinstance(d, dict) else None
    return None if q is None else check_quantization(q, str(cfg))


def natural_key(name: str) -> list[Any]:
    """Sort ``layers.10`` after ``layers.9``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
