"""The reference attention and block with the fused kernels swapped in: for decode steps, or for every step.

Chosen once, when the numpy backend is built (``build.py`` calls ``fused_applies`` and ``invariant_applies``): the
fused kernels pay off when the matrices run on numba kernels too (bf16 bits, quantized codes). float32 matrices run
on OpenBLAS's threads, and interleaving numba calls between its products measured slower than the numpy glue
(docs/performance.md), so float32 models keep the reference classes.

Two variants:

- ``FusedAttention`` / ``FusedBlock``: decode steps (S = 1) on the fused kernels, prefill on the reference code.
  Fastest prefill, but a token's bits depend on whether it was prefilled or decoded (numpy's pairwise sums and
  BLAS reduce in other orders than the fused loops).
- ``InvariantAttention`` / ``InvariantBlock`` (the default, ``FS_BATCH_INVARIANT``): every step on the same fused
  kernels, whose per-row, per-query loops do not depend on how many rows, queries or padded keys a call has. With
  the kept-weight linears on their row kernels for every M (bf16.py, affine.py), a sequence's logits are then the
  same bits alone or in any batch, prefilled in one call or in chunks, from a cold cache or a cached prefix.
"""

from typing import Any

import numpy as np

from fs_kvcache import PagedLayer, chunk_window

from ..numpy.attention import Attention
from ..numpy.block import Block
from ..numpy.linear import DenseLinear, Linear, timed
from ..numpy.mlp import MLP
from ..numpy.rope import RoPE
from . import HAVE_NUMBA, SWITCHES, attention, fused
from .silu_tiles import silu_mul
from .tile_groups import TileGroup


def fused_decode_applies(matrix: Linear) -> bool:
    """True when decode steps should use the fused kernels for a model whose matrices are like ``matrix``."""
    return HAVE_NUMBA and SWITCHES.fused_decode and not isinstance(matrix, DenseLinear)


def invariant_applies(matrix: Linear) -> bool:
    """True when every step should: the fused path applies and batch invariance is on (the default)."""
    return fused_decode_applies(matrix) and SWITCHES.batch_invariant


class FusedAttention(Attention):
    all_steps = False  # True: prefill too (InvariantAttention)

    def __init__(self, w: dict[str, Any], nh: int, nkv: int, D: int, eps: float, rope: RoPE, kv_bf16: bool = False):
        super().__init__(w, nh, nkv, D, eps, rope, kv_bf16)
        self.qkv = TileGroup.of([self.wq, self.wk, self.wv])  # one call for the three, where they tile alike

    def project(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x [B, S, H] -> q, k, v rows [B·S, out] (the same bits together or one by one: tile_groups.py)."""
        rows = x.reshape(-1, x.shape[-1])
        if self.qkv is None:
            return self.wq(rows), self.wk(rows), self.wv(rows)
        q, k, v = timed(self.qkv, rows)
        return q, k, v

    def __call__(
        self, x: np.ndarray, tables: tuple[np.ndarray, np.ndarray], cache: Any = None, pad: np.ndarray | None = None
    ) -> np.ndarray:
        B, S, _ = x.shape
        if S != 1 and (not self.all_steps or chunk_window(cache, S) is not None):  # a rotating window cuts it
            return super().__call__(x, tables, cache, pad)
        q, k, v = self.project(x)
        q = fused.norm_rope(q.reshape(B, S, self.nh, self.D), self.q_norm, self.eps, *tables)
        k = fused.norm_rope(k.reshape(B, S, self.nkv, self.D), self.k_norm, self.eps, *tables)
        v = v.reshape(B, S, self.nkv, self.D)
        if isinstance(cache, PagedLayer):  # an engine step: B = 1, the N tokens of every sequence in a row
            return self.wo(self._paged_fused(q[0], k[0], v[0], cache).reshape(B, S, self.nh * self.D))
        q, k, v = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, heads, S, D]
        if self.kv_bf16:
            k, v = fused.to_bf16(k), fused.to_bf16(v)
        K: Any
        V: Any
        if getattr(cache, "bits", 0):  # a QuantizedKVCache: the new positions as codes, its buffers read in place
            K, V, T = cache.update_and_fetch_buffers(self.quantize_kv(k, cache), self.quantize_kv(v, cache))
        elif cache is None:
            K, V, T = k, v, S
        elif hasattr(cache, "update_and_fetch_buffers"):  # a dense cache: its buffers, read in place
            K, V, T = cache.update_and_fetch_buffers(k, v)
        else:  # any other cache (a PagedKVCache: gathered from its blocks)
            K, V = cache.update_and_fetch(k, v)
            T = K.shape[2]
        out = attention.attend(q, K, V, T, self.scale, pad)  # [B, nh, S, D]
        return self.wo(out.transpose(0, 2, 1, 3).reshape(B, S, self.nh * self.D))

    def quantize_kv(self, x: np.ndarray, cache: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return fused.quantize_kv(x, cache.bits, cache.group_size, self.kv_bf16)  # the reference's bits, compiled

    def write_pool(self, cache: PagedLayer, k: np.ndarray, v: np.ndarray) -> None:
        """The new K/V [nkv, N, D] (in the cache's dtype) into their pool slots: as codes for a quantized pool (the
        engine's kv_bits), written before anything reads them. The fused path and the compiled block both write so."""
        st = cache.store
        if st.bits:
            k, v = (tuple(p[0] for p in self.quantize_kv(x[None], st)) for x in (k, v))  # type: ignore[assignment]
        st.write(cache.layer, cache.batch.slots, k, v)

    def _paged_fused(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, cache: PagedLayer) -> np.ndarray:
        """q [N, nh, D], k/v [N, nkv, D] -> [N, nh, D]: K/V into their slots, attention over the blocks in place."""
        st, layer, bt = cache.store, cache.layer, cache.batch
        k, v = k.transpose(1, 0, 2), v.transpose(1, 0, 2)  # [nkv, N, D]
        if self.kv_bf16:
            k, v = fused.to_bf16(k), fused.to_bf16(v)
        self.write_pool(cache, k, v)
        K, V = lead(st.k[layer]), lead(st.v[layer])
        rows = np.zeros(len(bt.context), np.int64)  # one pool: every sequence reads row 0
        return attention.attend_rows(q, K, V, rows, bt.tables, st.block_size, bt.starts, bt.context, self.scale)


def lead(side: Any) -> Any:
    """A pool layer's K or V (an array, or codes, scales and biases) with a leading axis of one row."""
    return tuple(part[None] for part in side) if isinstance(side, tuple) else side[None]


class FusedMLP(MLP):
    """SwiGLU with gate and up in one call where they tile alike (the same bits: tile_groups.py)."""

    def __init__(self, w: dict[str, Any]):
        super().__init__(w)
        self.gate_up = TileGroup.of([self.gate, self.up])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        rows = x.reshape(-1, x.shape[-1])
        g, u = timed(self.gate_up, rows) if self.gate_up is not None else (self.gate(rows), self.up(rows))
        return self.down(silu_mul(g, u).reshape(*x.shape[:-1], -1))  # silu in one compiled call


class FusedBlock(Block):
    all_steps = False

    def __init__(self, w: dict[str, Any], attention: Attention, eps: float, mlp: Any = None):
        super().__init__(w, attention, eps, FusedMLP(w) if mlp is None else mlp)  # mlp: a MoE layer's experts

    def norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return fused.rms_norm(x, w, self.eps) if x.shape[1] == 1 or self.all_steps else super().norm(x, w)


class InvariantAttention(FusedAttention):
    all_steps = True


class InvariantBlock(FusedBlock):
    all_steps = True
