"""Random LoRA adapters for a model directory, in mlx-lm's layout (what ``mlx_lm.lora`` saves) or PEFT's.

Adapters cannot be downloaded here either, so adapter loading is proven on ones this module writes. ``lora_b`` is
drawn non-zero (a freshly initialized adapter has ``lora_b = 0`` and would change nothing a test could see).
Dense layers only: a MoE model's experts are adapted in mlx-lm's stacked ``switch_mlp`` layout.
"""

import json
import os
import zlib
from pathlib import Path

import numpy as np

from .adapter import CONFIG, MLX_FILE, PEFT_FILE
from .config import load_config
from .crosscheck import expected_tensors
from .dtypes import code_for, from_float32
from .errors import WeightsError
from .safetensors import save_safetensors

# mlx-lm's default keys for a Qwen3 layer: every Linear in it
KEYS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)


def write_random_adapter(
    model: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    rank: int = 4,
    scale: float = 20.0,
    num_layers: int = -1,
    keys: tuple[str, ...] = KEYS,
    layout: str = "mlx",
    dora: bool = False,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Write an adapter for the last ``num_layers`` layers (-1: all, mlx-lm's meaning) of ``model`` to ``out``.
    ``layout``: "mlx" (``lora_a`` [in, r], ``lora_b`` [r, out], ``scale``) or "peft" (``lora_A.weight`` [r, in],
    ``lora_B.weight`` [out, r], ``lora_alpha = scale · r``, so both layouts mean the same update)."""
    if layout not in ("mlx", "peft") or (dora and layout != "mlx"):
        raise WeightsError(f"layout must be 'mlx' or 'peft' (dora only with 'mlx'), not {layout!r}")
    config = load_config(model)
    shapes = expected_tensors(config)
    L = config.num_hidden_layers
    layers = range(L - (L if num_layers < 0 else min(num_layers, L)), L)
    code = code_for(dtype)
    tensors: dict[str, np.ndarray] = {}
    for i in layers:
        for key in keys:
            module = f"model.layers.{i}.{key}"
            if module + ".weight" not in shapes:
                continue
            O, In = shapes[module + ".weight"]
            rng = np.random.default_rng([seed, zlib.crc32(module.encode())])
            A = rng.uniform(-1, 1, (rank, In)).astype(np.float32) / np.sqrt(In)
            B = rng.normal(0, 0.1 / scale, (O, rank)).astype(np.float32)
            if layout == "mlx":
                tensors |= {module + ".lora_a": A.T, module + ".lora_b": B.T}
                if dora:  # magnitudes near the base rows' norms: a visible but modest rescale
                    tensors[module + ".m"] = rng.uniform(0.5, 1.5, O).astype(np.float32)
            else:
                peft = "base_model.model." + module
                tensors |= {peft + ".lora_A.weight": A, peft + ".lora_B.weight": B}
    if not tensors:
        raise WeightsError(f"{model}: no layer has the keys {', '.join(keys)}")
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    stored = {n: from_float32(np.ascontiguousarray(t), code) for n, t in tensors.items()}
    dtypes = {n: code for n in stored}
    if layout == "mlx":
        cfg: dict[str, object] = {
            "fine_tune_type": "dora" if dora else "lora",
            "num_layers": num_layers,
            "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0, "keys": list(keys)},
        }
        save_safetensors(target / MLX_FILE, stored, dtypes)
    else:
        cfg = {
            "peft_type": "LORA",
            "r": rank,
            "lora_alpha": scale * rank,
            "target_modules": [k.split(".")[-1] for k in keys],
        }
        save_safetensors(target / PEFT_FILE, stored, dtypes)
    (target / CONFIG).write_text(json.dumps(cfg, indent=2) + "\n")
    return target
