"""Grouped-query attention with Qwen3's per-head q/k RMSNorm, RoPE and a KV cache.

Shapes: x [B, S, H] -> q [B, nh, S, D], k/v [B, nkv, S, D]; each group of nh/nkv query heads reads one kv head.
With ``kv_bf16`` the keys and values are rounded to bf16 as they are made and the cache holds their bit patterns
(uint16): half the bytes to keep and to read per token, as mlx-lm's bf16 models do. A ``QuantizedKVCache`` (one
with ``bits``) is handed the new positions as affine codes (kv_quant.py) and its history is read back dequantized.
"""

from typing import Any

import numpy as np

from fs_kvcache import PagedLayer, chunk_window
from fs_weights import bf16_to_f32, f32_to_bf16

from .kv_quant import dequantize_kv, quantize_kv
from .linear import Linear
from .norm import rms_norm
from .rope import RoPE

# Finite, so a query with no visible key (a left-padding row) gets a harmless uniform average, not NaN.
MASKED = np.float32(-1e30)
SCORES_BUDGET = 64 << 20  # bytes of attention scores at once: a 32k-token prompt needs no 60 GB score tensor


class Attention:
    def __init__(self, w: dict[str, Any], nh: int, nkv: int, D: int, eps: float, rope: RoPE, kv_bf16: bool = False):
        self.wq: Linear = w["q_proj"]
        self.wk: Linear = w["k_proj"]
        self.wv: Linear = w["v_proj"]
        self.wo: Linear = w["o_proj"]
        self.q_norm, self.k_norm = w["q_norm"], w["k_norm"]
        self.nh, self.nkv, self.D, self.eps, self.rope, self.kv_bf16 = nh, nkv, D, eps, rope, kv_bf16
        self.scale = np.float32(D**-0.5)

    def __call__(
        self, x: np.ndarray, tables: tuple[np.ndarray, np.ndarray], cache: Any = None, pad: np.ndarray | None = None
    ) -> np.ndarray:
        B, S, _ = x.shape
        q = self.wq(x).reshape(B, S, self.nh, self.D)
        k = self.wk(x).reshape(B, S, self.nkv, self.D)
        v = self.wv(x).reshape(B, S, self.nkv, self.D)
        q = rms_norm(q, self.q_norm, self.eps).transpose(0, 2, 1, 3)
        k = rms_norm(k, self.k_norm, self.eps).transpose(0, 2, 1, 3)
        v = v.transpose(0, 2, 1, 3)
        q, k = self.rope(q, *tables), self.rope(k, *tables)
        if self.kv_bf16:
            k, v = f32_to_bf16(k), f32_to_bf16(v)
        if isinstance(cache, PagedLayer):
            return self.wo(self._paged(q, k, v, cache).transpose(0, 2, 1, 3).reshape(B, S, self.nh * self.D))
        # a rotating cache's chunk: which keys each query sees (a sliding window), asked before the update
        allowed = chunk_window(cache, S)
        bits = getattr(cache, "bits", 0)
        if bits:  # a QuantizedKVCache: the new positions as codes in, the history dequantized out
            K, V = cache.update_and_fetch(self.quantize_kv(k, cache), self.quantize_kv(v, cache))
            k, v = dequantize_kv(K, bits, cache.group_size), dequantize_kv(V, bits, cache.group_size)
        else:
            if cache is not None:
                k, v = cache.update_and_fetch(k, v)
            if self.kv_bf16:
                k, v = bf16_to_f32(k), bf16_to_f32(v)
        T, G = k.shape[2], self.nh // self.nkv
        qg = q.reshape(B, self.nkv, G, S, self.D)  # query heads h = g·G + j share kv head g
        out = np.empty_like(qg)
        step = max(1, SCORES_BUDGET // (4 * B * self.nh * T))  # long prompts: the scores, a chunk of queries at a time
        for a in range(0, S, step):
            rows = allowed[a : a + step] if allowed is not None else None
            out[:, :, :, a : a + step] = self._attend(qg[:, :, :, a : a + step], k, v, T - S + a, pad, rows)
        out = out.reshape(B, self.nh, S, self.D)
        return self.wo(out.transpose(0, 2, 1, 3).reshape(B, S, self.nh * self.D))

    def quantize_kv(self, x: np.ndarray, cache: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """K or V [B, kv_heads, S, D] (float32, or bf16 bits) as the affine triple ``cache`` keeps."""
        return quantize_kv(x, cache.bits, cache.group_size, self.kv_bf16)

    def _paged(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, cache: PagedLayer) -> np.ndarray:
        """An engine step: the new K/V [1, nkv, N, D] written into their slots, then each sequence's queries over
        its history gathered from the blocks (the reference may copy; the fused kernel reads in place)."""
        st, layer, bt = cache.store, cache.layer, cache.batch
        if st.bits:  # a quantized pool (the engine's kv_bits): codes written before anything reads them
            st.write(layer, bt.slots, *(tuple(p[0] for p in quantize_kv(x, st.bits, st.group_size, self.kv_bf16))
                                        for x in (k, v)))  # fmt: skip
        else:
            st.write(layer, bt.slots, k[0], v[0])
        out = np.empty_like(q)  # [1, nh, N, D]
        G = self.nh // self.nkv
        for i in range(len(bt.context)):
            a, b, T = int(bt.starts[i]), int(bt.starts[i + 1]), int(bt.context[i])
            K, V = st.gather(layer, bt.tables[i], T)
            if st.bits:
                K, V = dequantize_kv(K, st.bits, st.group_size), dequantize_kv(V, st.bits, st.group_size)
            elif self.kv_bf16:
                K, V = bf16_to_f32(K), bf16_to_f32(V)
            qg = q[:, :, a:b].reshape(1, self.nkv, G, b - a, self.D)
            out[:, :, a:b] = self._attend(qg, K, V, T - (b - a), None).reshape(1, self.nh, b - a, self.D)
        return out

    def _attend(
        self,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        first: int,
        pad: np.ndarray | None,
        allowed: np.ndarray | None = None,
    ) -> np.ndarray:
        """Queries q [B, nkv, G, s, D] at cache positions first .. first+s-1 over the keys they can see
        (``allowed`` [s, >= first+s]: a further per-query restriction, a rotating cache's window)."""
        s = q.shape[3]
        T = first + s  # causal: later keys are invisible to every query here
        k, v = k[:, :, :T], v[:, :, :T]
        scores = (q @ k[:, :, None].swapaxes(-1, -2)) * self.scale  # [B, nkv, G, s, T]
        if s > 1:  # query i sees keys 0 .. first + i
            scores = np.where(np.arange(T) <= first + np.arange(s)[:, None], scores, MASKED)
        if allowed is not None:
            scores = np.where(allowed[:, :T], scores, MASKED)
        if pad is not None:  # row b's first pad[b] cache positions are left padding: no query may see them
            visible = np.arange(T) >= pad[:, None]  # [B, T]
            scores = np.where(visible[:, None, None, None, :], scores, MASKED)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        return probs @ v[:, :, None]
