"""One decoder block: pre-norm attention and pre-norm SwiGLU, each added to the residual stream."""

import numpy as np

from . import fused
from .attention import Attention
from .mlp import MLP
from .norm import rms_norm


class Block:
    def __init__(self, w: dict[str, np.ndarray], attention: Attention, eps: float):
        self.attn, self.mlp = attention, MLP(w)
        self.norm1, self.norm2, self.eps = w["input_layernorm"], w["post_attention_layernorm"], eps

    def __call__(self, x: np.ndarray, tables, cache=None, pad: np.ndarray | None = None) -> np.ndarray:
        norm = fused.rms_norm if x.shape[1] == 1 and self.attn.fused else rms_norm
        x = x + self.attn(norm(x, self.norm1, self.eps), tables, cache, pad)
        return x + self.mlp(norm(x, self.norm2, self.eps))
