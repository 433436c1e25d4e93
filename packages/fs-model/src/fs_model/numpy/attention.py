"""Grouped-query attention with Qwen3's per-head q/k RMSNorm, RoPE and a KV cache.

Shapes: x [B, S, H] -> q [B, nh, S, D], k/v [B, nkv, S, D]; each group of nh/nkv query heads reads one kv head.
"""

import numpy as np

from . import fused
from .mlp import linear
from .norm import rms_norm
from .rope import RoPE

# Finite, so a query with no visible key (a left-padding row) gets a harmless uniform average, not NaN.
MASKED = np.float32(-1e30)


class Attention:
    def __init__(self, w: dict[str, np.ndarray], nh: int, nkv: int, D: int, eps: float, rope: RoPE):
        self.wq, self.wk, self.wv, self.wo = w["q_proj"], w["k_proj"], w["v_proj"], w["o_proj"]
        self.q_norm, self.k_norm = w["q_norm"], w["k_norm"]
        self.nh, self.nkv, self.D, self.eps, self.rope = nh, nkv, D, eps, rope
        self.scale = np.float32(D**-0.5)

    @property
    def fused(self) -> bool:
        """Decode steps use fused.py when the matrices run on numba kernels (bf16 bits, quantized codes). float32
        matrices run on OpenBLAS's threads, and interleaving numba calls between its products measured slower
        than the numpy glue (docs/performance.md)."""
        return fused.ENABLED and not (isinstance(self.wq, np.ndarray) and self.wq.dtype == np.float32)

    def __call__(
        self, x: np.ndarray, tables: tuple[np.ndarray, np.ndarray], cache=None, pad: np.ndarray | None = None
    ) -> np.ndarray:
        B, S, _ = x.shape
        if S == 1 and self.fused:
            return self._decode_step(x, tables, cache, pad)
        q = linear(x, self.wq).reshape(B, S, self.nh, self.D)
        k = linear(x, self.wk).reshape(B, S, self.nkv, self.D)
        v = linear(x, self.wv).reshape(B, S, self.nkv, self.D)
        q = rms_norm(q, self.q_norm, self.eps).transpose(0, 2, 1, 3)
        k = rms_norm(k, self.k_norm, self.eps).transpose(0, 2, 1, 3)
        v = v.transpose(0, 2, 1, 3)
        q, k = self.rope(q, *tables), self.rope(k, *tables)
        if cache is not None:
            k, v = cache.update_and_fetch(k, v)
        T = k.shape[2]
        G = self.nh // self.nkv
        qg = q.reshape(B, self.nkv, G, S, self.D)  # query heads h = g·G + j share kv head g
        scores = (qg @ k[:, :, None].swapaxes(-1, -2)) * self.scale  # [B, nkv, G, S, T]
        if S > 1:
            past = T - S  # query i sits at cache position past + i and sees keys 0 .. past + i
            scores = np.where(np.arange(T) <= past + np.arange(S)[:, None], scores, MASKED)
        if pad is not None:  # row b's first pad[b] cache positions are left padding: no query may see them
            visible = np.arange(T) >= pad[:, None]  # [B, T]
            scores = np.where(visible[:, None, None, None, :], scores, MASKED)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        out = (probs @ v[:, :, None]).reshape(B, self.nh, S, self.D)
        return linear(out.transpose(0, 2, 1, 3).reshape(B, S, self.nh * self.D), self.wo)

    def _decode_step(self, x: np.ndarray, tables: tuple[np.ndarray, np.ndarray], cache, pad) -> np.ndarray:
        """The same computation for one token per row, with fused.py's kernels instead of the numpy glue."""
        B = x.shape[0]
        q = fused.norm_rope(linear(x, self.wq).reshape(B, self.nh, self.D), self.q_norm, self.eps, *tables)
        k = fused.norm_rope(linear(x, self.wk).reshape(B, self.nkv, self.D), self.k_norm, self.eps, *tables)
        v = linear(x, self.wv).reshape(B, self.nkv, 1, self.D)
        K, V = cache.update_and_fetch(k[:, :, None], v) if cache is not None else (k[:, :, None], v)
        out = fused.attend(q, K, V, self.scale, pad)
        return linear(out.reshape(B, 1, self.nh * self.D), self.wo)
