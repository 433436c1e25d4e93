"""Rotary position embedding as Qwen3 uses it: split-half (not interleaved), base ``rope_theta``.

Dimension pairs are (i, i + D/2), rotated by angle pos · theta^(-2i/D). Angles are computed in float64 and
rounded once, so position 40,000 is as accurate as position 0.
"""

import numpy as np


class RoPE:
    def __init__(self, head_dim: int, theta: float):
        self.half = head_dim // 2
        self.inv_freq = theta ** (-np.arange(0, self.half, dtype=np.float64) * 2 / head_dim)

    def tables(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos/sin ``[..., D/2]`` for integer ``positions`` of any shape ([S], or [B, 1, S] for per-row positions)."""
        angles = positions.astype(np.float64)[..., None] * self.inv_freq
        return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)

    def __call__(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """x: [..., S, D]; cos/sin broadcastable to [..., S, D/2]."""
        x1, x2 = x[..., : self.half], x[..., self.half :]
        return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
