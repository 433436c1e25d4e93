"""SwiGLU: down(silu(gate(x)) ⊙ up(x)), silu(z) = z · sigmoid(z)."""

from typing import Any

import numpy as np

from .linear import Linear


def silu(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-z) -> inf for z << 0 gives z / inf = -0, which is right
        return z / (np.float32(1.0) + np.exp(-z))


class MLP:
    def __init__(self, w: dict[str, Any]):
        self.gate: Linear = w["gate_proj"]
        self.up: Linear = w["up_proj"]
        self.down: Linear = w["down_proj"]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.down(silu(self.gate(x)) * self.up(x))
