"""SwiGLU: down(silu(gate(x)) ⊙ up(x)), silu(z) = z · sigmoid(z)."""

import numpy as np


def silu(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-z) -> inf for z << 0 gives z / inf = -0, which is right
        return z / (np.float32(1.0) + np.exp(-z))


class MLP:
    def __init__(self, w: dict[str, np.ndarray]):
        self.gate, self.up, self.down = w["gate_proj"], w["up_proj"], w["down_proj"]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (silu(x @ self.gate.T) * (x @ self.up.T)) @ self.down.T
