"""RMSNorm in float32: y = x / sqrt(mean(x²) + eps) * w, over the last axis."""

import numpy as np


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    ms = np.mean(np.square(x, dtype=np.float32), axis=-1, keepdims=True)
    return x * (1.0 / np.sqrt(ms + np.float32(eps))) * w
