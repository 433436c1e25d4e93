"""The decode step on fused kernels: the reference attention and block with their S = 1 path swapped in.

Chosen once, when the numpy backend is built (``build.py`` calls ``fused_decode_applies``): the fused kernels pay
off when the matrices run on numba kernels too (bf16 bits, quantized codes). float32 matrices run on OpenBLAS's
threads, and interleaving numba calls between its products measured slower than the numpy glue
(docs/performance.md). Prefill (S > 1) is the reference code unchanged.
"""

from typing import Any

import numpy as np

from fs_weights import f32_to_bf16

from ..numpy.attention import Attention
from ..numpy.block import Block
from ..numpy.linear import DenseLinear, Linear
from . import HAVE_NUMBA, SWITCHES, fused


def fused_decode_applies(matrix: Linear) -> bool:
    """True when decode steps should use the fused kernels for a model whose matrices are like ``matrix``."""
    return HAVE_NUMBA and SWITCHES.fused_decode and not isinstance(matrix, DenseLinear)


class FusedAttention(Attention):
    def __call__(
        self, x: np.ndarray, tables: tuple[np.ndarray, np.ndarray], cache: Any = None, pad: np.ndarray | None = None
    ) -> np.ndarray:
        if x.shape[1] != 1:
            return super().__call__(x, tables, cache, pad)
        B = x.shape[0]
        q = fused.norm_rope(self.wq(x).reshape(B, self.nh, self.D), self.q_norm, self.eps, *tables)
        k = fused.norm_rope(self.wk(x).reshape(B, self.nkv, self.D), self.k_norm, self.eps, *tables)
        k, v = k[:, :, None], self.wv(x).reshape(B, self.nkv, 1, self.D)
        if self.kv_bf16:
            k, v = f32_to_bf16(k), f32_to_bf16(v)
        if cache is None:
            K, V, T = k, v, 1
        elif hasattr(cache, "update_and_fetch_buffers"):  # a dense cache: its buffers, read in place
            K, V, T = cache.update_and_fetch_buffers(k, v)
        else:  # any other cache (paged: gathered from its blocks)
            K, V = cache.update_and_fetch(k, v)
            T = K.shape[2]
        out = fused.attend(q, K, V, T, self.scale, pad)
        return self.wo(out.reshape(B, 1, self.nh * self.D))


class FusedBlock(Block):
    def norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return fused.rms_norm(x, w, self.eps) if x.shape[1] == 1 else super().norm(x, w)
