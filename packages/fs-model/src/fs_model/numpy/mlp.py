"""SwiGLU: down(silu(gate(x)) ⊙ up(x)), silu(z) = z · sigmoid(z)."""

import numpy as np

from .kernels import linear_bf16
from .quantized import AffineWeight, linear_affine


def linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ wᵀ`` for x [..., in] and w [out, in], as ONE matrix product: numpy would otherwise run a separate
    matrix-vector product per leading index (re-reading w B times for a batch of B single-token rows).
    A uint16 ``w`` holds bf16 bits (``load_model(..., dtype="bfloat16")``) and an ``AffineWeight`` quantized codes
    (``quantize="int8"`` or a native MLX 4/8-bit checkpoint): both go to their kernels."""
    if isinstance(w, AffineWeight):
        return linear_affine(x, w)
    if w.dtype == np.uint16:
        return linear_bf16(x, w)
    return (x.reshape(-1, x.shape[-1]) @ w.T).reshape(*x.shape[:-1], w.shape[0])


def silu(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-z) -> inf for z << 0 gives z / inf = -0, which is right
        return z / (np.float32(1.0) + np.exp(-z))


class MLP:
    def __init__(self, w: dict[str, np.ndarray]):
        self.gate, self.up, self.down = w["gate_proj"], w["up_proj"], w["down_proj"]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return linear(silu(linear(x, self.gate)) * linear(x, self.up), self.down)
