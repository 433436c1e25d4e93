"""LoRA adapters: mlx-lm's format (``adapter_config.json`` + ``adapters.safetensors``) and PEFT's
(``adapter_config.json`` + ``adapter_model.safetensors``), read into one shape: per adapted weight ``W`` [out, in],
a low-rank pair ``A`` [r, in], ``B`` [out, r] and a scale, so that the adapted weight is

    W' = W + scale · B @ A              (LoRA; DoRA then rescales each row to its learned magnitude m)

mlx-lm stores ``lora_a`` [in, r] and ``lora_b`` [r, out] (``x @ lora_a @ lora_b``) with ``scale`` given directly;
PEFT stores ``lora_A.weight`` [r, in] and ``lora_B.weight`` [out, r] with ``scale = lora_alpha / r`` (or
``lora_alpha / sqrt(r)`` with ``use_rslora``). Only what the file holds is applied: mlx-lm's LoRA layers without
saved values start with ``lora_b = 0`` and change nothing, so ``num_layers`` and ``keys`` add nothing to it.
A full fine-tune (mlx-lm's ``fine_tune_type: full``) holds the trained layers' tensors themselves (matrices and
norms, under the model's names), and they replace the base's.
"""

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .dtypes import FLOATS, to_float32
from .errors import WeightsError
from .finite import check_finite
from .jsonfile import read_json
from .safetensors import SafetensorsFile

CONFIG, MLX_FILE, PEFT_FILE = "adapter_config.json", "adapters.safetensors", "adapter_model.safetensors"
TYPES = ("lora", "dora", "full")  # mlx-lm's fine_tune_type values; "full" holds the trained tensors themselves
# mlx-lm's stacked MoE experts: one lora pair per expert, [E, r, in] and [E, out, r]
SWITCH = re.compile(r"(.+\.mlp)\.switch_mlp\.(gate_proj|up_proj|down_proj)$")


class AdapterError(WeightsError):
    """An adapter directory fs cannot apply (file, key or tensor named)."""


@dataclass(frozen=True)
class LowRank:
    """One adapted weight's update: ``W + scale · B @ A``, then (DoRA) rows rescaled to norm ``m``."""

    A: np.ndarray  # [r, in] float32
    B: np.ndarray  # [out, r] float32
    scale: float
    m: np.ndarray | None = None  # [out] float32: DoRA's magnitudes

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.B.shape[0], self.A.shape[1])

    def apply(self, w: np.ndarray) -> np.ndarray:
        """``w`` [out, in] as float32 -> the adapted weight, in float32 (the one rounding is the caller's)."""
        if w.shape != self.shape:
            raise AdapterError(f"the adapter's update is {list(self.shape)}; the weight is {list(w.shape)}")
        fused = w + (np.float32(self.scale) * self.B) @ self.A
        if self.m is not None:
            fused *= (self.m / np.linalg.norm(fused, axis=1))[:, None]
        return fused.astype(np.float32, copy=False)


@dataclass(frozen=True)
class Replacement:
    """A full fine-tune's tensor (mlx-lm's ``fine_tune_type: full``): the trained values replace the base's."""

    values: np.ndarray  # float32, the tensor's shape

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    def apply(self, w: np.ndarray) -> np.ndarray:
        if w.shape != self.shape:
            raise AdapterError(f"the adapter's tensor is {list(self.shape)}; the weight is {list(w.shape)}")
        return self.values


Update = LowRank | Replacement


@dataclass(frozen=True)
class Adapter:
    path: Path
    kind: str  # "lora", "dora" or "full"
    updates: dict[str, Update] = field(repr=False)  # fs's tensor name ("...q_proj.weight") -> its update
    digest: str = ""  # SHA-256 of the config and weight files: part of the adapted model's identity


def load_adapter(path: str | os.PathLike[str]) -> Adapter:
    """Read an adapter directory (either format), checking every tensor before anything is applied."""
    p = Path(path)
    if not p.is_dir():
        raise AdapterError(f"{p}: no such adapter directory (it holds {CONFIG} and {MLX_FILE} or {PEFT_FILE})")
    if not (p / CONFIG).is_file():
        raise AdapterError(f"{p}: no {CONFIG}; an adapter directory is what mlx_lm.lora or PEFT saves")
    cfg = read_json(p / CONFIG, AdapterError)
    if not isinstance(cfg, dict):
        raise AdapterError(f"{p / CONFIG}: must be a JSON object")
    if (p / MLX_FILE).is_file():
        kind, updates = _mlx(p, cfg)
    elif (p / PEFT_FILE).is_file():
        kind, updates = _peft(p, cfg)
    else:
        raise AdapterError(f"{p}: no {MLX_FILE} (mlx-lm) or {PEFT_FILE} (PEFT) beside {CONFIG}")
    if not updates:
        raise AdapterError(f"{p}: the adapter holds no LoRA tensors")
    h = hashlib.sha256()
    for f in (CONFIG, MLX_FILE, PEFT_FILE):
        if (p / f).is_file():
            h.update(f.encode() + b"\0" + (p / f).read_bytes())
    return Adapter(p, kind, updates, h.hexdigest())


def _mlx(p: Path, cfg: dict[str, Any]) -> tuple[str, dict[str, Update]]:
    kind = cfg.get("fine_tune_type", "dora" if cfg.get("use_dora") else "lora")
    if kind == "full":  # the trained layers' tensors themselves, under the model's names
        return kind, {name: Replacement(t) for name, t in _tensors(p / MLX_FILE).items()}
    if kind not in TYPES:
        raise AdapterError(f"{p / CONFIG}: fine_tune_type {kind!r} is not one of {', '.join(TYPES)}")
    params = cfg.get("lora_parameters")
    if not isinstance(params, dict) or not isinstance(params.get("scale"), (int, float)):
        raise AdapterError(f"{p / CONFIG}: 'lora_parameters' must be an object with a numeric 'scale'")
    scale = float(params["scale"])
    t = _tensors(p / MLX_FILE)
    updates: dict[str, Update] = {}
    for module in sorted({n.rsplit(".", 1)[0] for n in t}):
        a, b, m = (t.pop(f"{module}.{s}", None) for s in ("lora_a", "lora_b", "m"))
        if a is None or b is None:
            raise AdapterError(f"{p / MLX_FILE}: {module!r} has {'lora_a' if b is None else 'lora_b'} without its pair")
        if m is not None and kind != "dora":
            raise AdapterError(f"{p / MLX_FILE}: {module}.m is DoRA's magnitude but fine_tune_type is {kind!r}")
        if (switch := SWITCH.match(module)) is not None:  # [E, r, in] and [E, out, r]: one update per expert
            _shape(p / MLX_FILE, module, a, b, stacked=True)
            for e in range(a.shape[0]):
                updates[f"{switch[1]}.experts.{e}.{switch[2]}.weight"] = LowRank(a[e], b[e], scale)
            continue
        _shape(p / MLX_FILE, module, a.T, b.T, stacked=False)
        updates[_target(p / MLX_FILE, module)] = LowRank(np.ascontiguousarray(a.T), np.ascontiguousarray(b.T), scale, m)
    if t:
        raise AdapterError(f"{p / MLX_FILE}: tensor {sorted(t)[0]!r} is not a lora_a, lora_b or DoRA m")
    return kind, updates


def _peft(p: Path, cfg: dict[str, Any]) -> tuple[str, dict[str, Update]]:
    where = p / CONFIG
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise AdapterError(f"{where}: peft_type {cfg.get('peft_type')!r} is not LORA")
    for key, off in (("use_dora", False), ("fan_in_fan_out", False), ("bias", "none")):
        if cfg.get(key, off) not in (off, None):
            raise AdapterError(f"{where}: {key}={cfg[key]!r} is not supported (only {off!r})")
    for key in ("rank_pattern", "alpha_pattern"):
        if cfg.get(key):
            raise AdapterError(f"{where}: {key} (per-module ranks or alphas) is not supported")
    r, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if not isinstance(r, int) or r < 1 or not isinstance(alpha, (int, float)):
        raise AdapterError(f"{where}: 'r' (a positive integer) and 'lora_alpha' (a number) are required")
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    t = _tensors(p / PEFT_FILE)
    updates: dict[str, Update] = {}
    for name in sorted(n for n in t if n.endswith(".lora_A.weight")):
        module = name.removesuffix(".lora_A.weight")
        a, b = t.pop(name), t.pop(module + ".lora_B.weight", None)
        if b is None:
            raise AdapterError(f"{p / PEFT_FILE}: {module!r} has lora_A without its lora_B")
        _shape(p / PEFT_FILE, module, a, b, stacked=False)
        updates[_target(p / PEFT_FILE, module.removeprefix("base_model.model."))] = LowRank(a, b, scale)
    if t:
        raise AdapterError(f"{p / PEFT_FILE}: tensor {sorted(t)[0]!r} is not a lora_A / lora_B weight")
    return "lora", updates


def _tensors(path: Path) -> dict[str, np.ndarray]:
    f = SafetensorsFile(path)
    out = {}
    for name, info in f.tensors.items():
        if info.dtype not in FLOATS:
            raise AdapterError(f"{path}: tensor {name!r} is {info.dtype}; adapter tensors are floats")
        raw = f.raw(name)
        check_finite(raw, info.dtype, f"{path}: tensor {name!r}")
        out[name] = np.array(to_float32(raw, info.dtype), dtype=np.float32)  # a copy: the file may close
    f.close()
    return out


def _shape(path: Path, module: str, A: np.ndarray, B: np.ndarray, *, stacked: bool) -> None:
    """A [.., r, in] and B [.., out, r] must agree on r (and, stacked, on the expert count)."""
    nd = 3 if stacked else 2
    if A.ndim != nd or B.ndim != nd or A.shape[-2] != B.shape[-1] or A.shape[:-2] != B.shape[:-2]:
        raise AdapterError(
            f"{path}: {module!r}: the pair's shapes {list(A.shape)} and {list(B.shape)} do not form a rank-r update"
        )


def _target(path: Path, module: str) -> str:
    if module.endswith("embed_tokens"):
        raise AdapterError(f"{path}: {module!r}: a LoRA on the embedding is not supported (only on linear layers)")
    return module + ".weight"
