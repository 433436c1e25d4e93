"""``rope_scaling`` from config.json: the rotary frequencies and the attention scale every backend uses.

Why: Qwen3 is trained on 32,768 positions; its documented way past them is YaRN, switched on in config.json:
``"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}``. One function
computes what changes, so the numpy reference, the CPU kernels (which take its cos/sin tables) and MLX (which takes
its frequencies) cannot disagree.

Contract: ``rope_parameters(config) -> (inv_freq [D/2] float64, mscale)``; the angle of pair ``i`` at position
``p`` is ``p * inv_freq[i]``, and q and k are both multiplied by ``mscale`` (so attention logits by mscale²).

- none / ``default``: ``inv_freq[i] = theta^(-2i/D)``, mscale 1.
- ``linear``: ``inv_freq / factor`` (positions squeezed by the factor).
- ``yarn`` (mlx-lm's ``YarnRoPE``, HF's ``_compute_yarn_parameters``): with ``L`` the original context, the pairs
  that turn fewer than ``beta_slow`` (1) times over L are interpolated (``inv_freq / factor``), those turning more
  than ``beta_fast`` (32) times are kept, and a linear ramp blends the pairs between;
  ``mscale = (0.1 ln(factor) mscale + 1) / (0.1 ln(factor) mscale_all_dim + 1)`` (defaults 1 and 0), or
  ``attention_factor`` when the config gives it.

Worked example, Qwen3-0.6B (D = 128, theta = 1e6) with factor 4 and L = 32,768: the ramp runs from pair
floor(23.6) = 23 to ceil(39.7) = 40, so pairs 0-23 are kept, pairs 40-63 are divided by 4, pairs 24-39 are blended,
and mscale = 0.1 ln 4 + 1 = 1.1386. ``context(config)`` is then
``max(max_position_embeddings, factor * L)`` = 131,072: the limit every layer above enforces. Any other
``rope_type`` (``dynamic``, whose frequencies change with the sequence length, ``longrope``, ``llama3``) is refused
by name.
"""

import math
from typing import Any

import numpy as np

from fs_weights import Qwen3Config

from .errors import ModelError

KINDS = ("default", "linear", "yarn")


def kind(scaling: dict[str, Any] | None) -> str:
    if not scaling:
        return "default"
    return str(scaling.get("rope_type") or scaling.get("type") or "default")


def check(config: Qwen3Config) -> None:
    """A ``rope_scaling`` fs computes, with the keys it needs (a ``ModelError`` naming the file and key)."""
    s, where = config.rope_scaling, f"{config.source}: rope_scaling"
    k = kind(s)
    if k not in KINDS:
        raise ModelError(f"{where} type {k!r} is not implemented (fs computes: {', '.join(KINDS)})")
    if k == "default":
        return
    assert s is not None
    factor = s.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor < 1:
        raise ModelError(f"{where}.factor must be a number >= 1, got {factor!r}")
    if k == "yarn":
        orig = s.get("original_max_position_embeddings")
        if type(orig) is not int or orig < 1:
            raise ModelError(f"{where}.original_max_position_embeddings must be a positive int, got {orig!r}")
        for key in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor"):
            v = s.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise ModelError(f"{where}.{key} must be a number, got {v!r}")


def context(config: Qwen3Config) -> int:
    """The positions the scaled model serves: YaRN's ``factor * original``, or the config's own limit if larger."""
    s = config.rope_scaling
    if kind(s) == "yarn" and s is not None:
        return max(config.max_position_embeddings, int(s["factor"] * s["original_max_position_embeddings"]))
    return config.max_position_embeddings


def rope_parameters(config: Qwen3Config) -> tuple[np.ndarray, float]:
    D, theta, s = config.dim_head, float(config.rope_theta), config.rope_scaling
    inv = theta ** (-np.arange(0, D // 2, dtype=np.float64) * 2 / D)
    k = kind(s)
    if k == "default" or s is None:
        return inv, 1.0
    factor = float(s["factor"])
    if k == "linear":
        return inv / factor, 1.0
    L = float(s["original_max_position_embeddings"])
    beta_fast, beta_slow = float(s.get("beta_fast", 32)), float(s.get("beta_slow", 1))

    def dim_of(rotations: float) -> float:  # the pair index that turns ``rotations`` times over L positions
        return D * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = float(max(math.floor(dim_of(beta_fast)), 0)), float(min(math.ceil(dim_of(beta_slow)), D - 1))
    if low == high:
        high += 0.001  # mlx-lm's guard against a zero-width ramp
    ramp = np.clip((np.arange(D // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp  # 1: extrapolate (the pair as trained), 0: interpolate (divided by the factor)
    inv = inv * keep + (inv / factor) * (1.0 - keep)

    def gain(m: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    if s.get("attention_factor") is not None:
        return inv, float(s["attention_factor"])
    return inv, gain(float(s.get("mscale", 1))) / gain(float(s.get("mscale_all_dim", 0)))
