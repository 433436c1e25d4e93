"""Rotary position embedding as Qwen3 uses it: split-half (not interleaved), base ``rope_theta``.

Dimension pairs are (i, i + D/2), rotated by angle pos · theta^(-2i/D) - or by the frequencies config.json's
``rope_scaling`` gives (rope_scaling.py: ``inv_freq``, and ``mscale``, folded into the tables since rotating
``m·x`` is ``m`` times rotating ``x``). Angles are computed in float64 and rounded once, so position 40,000 is as
accurate as position 0.
"""

import numpy as np


class RoPE:
    def __init__(self, head_dim: int, theta: float, inv_freq: np.ndarray | None = None, mscale: float = 1.0):
        self.half = head_dim // 2
        self.inv_freq = theta ** (-np.arange(0, self.half, dtype=np.float64) * 2 / head_dim)
        if inv_freq is not None:
            self.inv_freq = np.asarray(inv_freq, dtype=np.float64)
        self.mscale = float(mscale)

    def tables(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos/sin ``[..., D/2]`` for integer ``positions`` of any shape ([S], or [B, 1, S] for per-row positions)."""
        angles = positions.astype(np.float64)[..., None] * self.inv_freq
        m = self.mscale
        return (m * np.cos(angles)).astype(np.float32), (m * np.sin(angles)).astype(np.float32)

    def __call__(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """x: [..., S, D]; cos/sin broadcastable to [..., S, D/2]."""
        x1, x2 = x[..., : self.half], x[..., self.half :]
        return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
