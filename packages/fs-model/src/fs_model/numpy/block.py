"""One decoder block: pre-norm attention and pre-norm SwiGLU, each added to the residual stream."""

from typing import Any

import numpy as np

from .attention import Attention
from .mlp import MLP
from .norm import rms_norm


class Block:
    def __init__(self, w: dict[str, Any], attention: Attention, eps: float, mlp: Any = None):
        self.attn, self.mlp = attention, MLP(w) if mlp is None else mlp  # mlp: a SparseMoE in Qwen3-MoE layers
        self.norm1, self.norm2, self.eps = w["input_layernorm"], w["post_attention_layernorm"], eps

    def norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return rms_norm(x, w, self.eps)

    def __call__(self, x: np.ndarray, tables: Any, cache: Any = None, pad: np.ndarray | None = None) -> np.ndarray:
        x = x + self.attn(self.norm(x, self.norm1), tables, cache, pad)
        return x + self.mlp(self.norm(x, self.norm2))
