"""A decoder block's step in two compiled calls around the cache write: every step of a kept-weight model over a
dense cache (generate, fs-chat, prompt-cache files) or the engine's block pool, decode and prefill, with batch
invariance on (the default).

Why: ``InvariantBlock`` runs a layer as ~20 Python calls (norms, the q/k/v, o, gate/up and down products, the
per-head norm and RoPE, attention, SiLU, the residual adds), each a few microseconds of dispatch for a few
kilobytes of work. In a 0.6B Q4_K_M decode step (Zen 4, 2026-12-06) that glue was 5.5 of 21 ms where llama.cpp's
whole step takes 15.8. Here a layer is two numba calls and the cache's own write between them:

    attention_in    x [m, H] -> RMSNorm -> q | k | v (one call or three) -> per-head RMSNorm + RoPE
                    -> q [m, nh, D], and k, v [B, nkv, S, D] in the cache's dtype (bf16 bits or float32)
    (Python)        the cache writes k, v (fs_kvcache decides where; a quantized cache or pool, ``--kv-bits``,
                    their codes: fused.quantize_kv); K, V: its buffers or its block pool
    attention_out   attention over K, V -> o -> + x -> RMSNorm -> gate | up -> silu(g)·u -> down -> + -> x' [m, H]

The contract is ``InvariantBlock``'s bits: the same compiled kernels (tile_calls._run, fused._rms_rows /
_norm_rope / _silu_mul, attention._attend) on the same values in the same order, only without Python between
them; tests/test_compiled_block.py compares every logit against it on every kept format, and the engine's pool.
A Qwen3-MoE layer's second half runs its router, routing (routing.py) and grouped experts (experts.py) in
place of the MLP, the calls its Python path makes, so the bits are that path's too. Where a step needs anything
else - a rotating cache's chunk, a cache gathered from blocks, matrices off the tiles - the block takes
InvariantBlock's path, so which path ran never shows in a result.
"""

import threading
from typing import Any

import numpy as np

from fs_kvcache import PagedLayer, chunk_window

from ..numpy.linear import timed
from . import HAVE_NUMBA
from .attention import _code_format, _contiguous
from .attention_calls import kernels
from .decode_step import FusedMLP, InvariantAttention, InvariantBlock, lead
from .experts import GroupedMoE
from .silu_tiles import kernel as silu_kernel
from .threads import bucket, fan_out
from .tile_calls import TileCall

if HAVE_NUMBA:
    from numba import njit, types
    from numba.extending import overload

    from .attention import _attend
    from .experts import _experts
    from .fused import _norm_rope, _rms_rows, _to_bf16
    from .routing import _route
    from .silu_tiles import _silu_mul
    from .tile_calls import _run

    def _put_kv(x, out):  # type: ignore[no-untyped-def]  # pragma: no cover - replaced by the overload below
        raise NotImplementedError

    @overload(_put_kv)
    def _put_kv_overload(x, out):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
        """x [m, nkv, D] float32 (rows b·S + s) -> out [B, nkv, S, D]: bf16 bits (fused.to_bf16's rounding) or
        float32, as the cache stores them."""
        if out.dtype == types.uint16:

            def bf16(x, out):  # type: ignore[no-untyped-def]
                B, nkv, S, D = out.shape
                bits = np.empty(x.size, np.uint16)
                _to_bf16(np.ascontiguousarray(x).reshape(-1).view(np.uint32), bits)
                for r in range(B * S):
                    for h in range(nkv):
                        for d in range(D):
                            out[r // S, h, r % S, d] = bits[(r * nkv + h) * D + d]

            return bf16

        def f32(x, out):  # type: ignore[no-untyped-def]
            B, nkv, S, D = out.shape
            for r in range(B * S):
                for h in range(nkv):
                    for d in range(D):
                        out[r // S, h, r % S, d] = x[r, h, d]

        return f32

    @njit(cache=True)
    def _attention_in(x, ln, eps, calls, grouped, n, qn, kn, cos, sin, k_out, v_out):  # pragma: no cover
        """The block's first half (the module docstring); n = (q columns, k columns, head size)."""
        m = x.shape[0]
        nq, nk, D = n
        h = np.empty_like(x)
        _rms_rows(x, ln, eps, h)
        if grouped:  # one call: q, k and v tile alike (tile_groups.py)
            qkv = np.empty((m, nq + 2 * nk), np.float32)
            _run(*calls[0], h, qkv)  # type: ignore[call-arg]
            q, k = np.ascontiguousarray(qkv[:, :nq]), np.ascontiguousarray(qkv[:, nq : nq + nk])
            v = np.ascontiguousarray(qkv[:, nq + nk :])
        else:
            q, k, v = np.empty((m, nq), np.float32), np.empty((m, nk), np.float32), np.empty((m, nk), np.float32)
            _run(*calls[0], h, q)  # type: ignore[call-arg]
            _run(*calls[1], h, k)  # type: ignore[call-arg]
            _run(*calls[2], h, v)  # type: ignore[call-arg]
        qr, kr = np.empty((m, nq // D, D), np.float32), np.empty((m, nk // D, D), np.float32)
        _norm_rope(q.reshape(m, nq // D, D), qn, eps, cos, sin, qr)
        _norm_rope(k.reshape(m, nk // D, D), kn, eps, cos, sin, kr)
        _put_kv(kr, k_out)
        _put_kv(v.reshape(m, nk // D, D), v_out)
        return qr

    @njit(cache=True)
    def _attention(x, q, K, V, rows, tables, bs, starts, context, pads, scale, fns, wo, ln, eps):  # pragma: no cover
        """Attention over K, V -> o -> h = x + o, and RMSNorm(h): the second half up to the MLP. Where each
        sequence's keys are: ``attention._attend_impl``'s names."""
        m, H = x.shape
        att = np.empty_like(q)
        _attend(q, K, V, rows, tables, bs, starts, context, pads, scale, fns, att)  # type: ignore[call-arg]
        o = np.empty((m, H), np.float32)
        _run(*wo, att.reshape(m, q.shape[1] * q.shape[2]), o)  # type: ignore[call-arg]
        h = x + o
        hn = np.empty_like(h)
        _rms_rows(h, ln, eps, hn)
        return h, hn

    @njit(cache=True)
    def _attention_out(
        x, q, K, V, rows, tables, bs, starts, context, pads, scale, fns, wo, ln, eps, mlp, grouped, I, silu, down
    ):  # pragma: no cover
        """The block's second half (the module docstring): x [m, H] the residual stream, q [m, nh, D]; I the MLP's
        width, silu its kernel (silu_tiles.py)."""
        m, H = x.shape
        h, hn = _attention(x, q, K, V, rows, tables, bs, starts, context, pads, scale, fns, wo, ln, eps)
        if grouped:
            gu = np.empty((m, 2 * I), np.float32)
            _run(*mlp[0], hn, gu)  # type: ignore[call-arg]
            g, u = np.ascontiguousarray(gu[:, :I]), np.ascontiguousarray(gu[:, I:])
        else:
            g, u = np.empty((m, I), np.float32), np.empty((m, I), np.float32)
            _run(*mlp[0], hn, g)  # type: ignore[call-arg]
            _run(*mlp[1], hn, u)  # type: ignore[call-arg]
        a = np.empty((m, I), np.float32)
        _silu_mul(silu, g, u, a)
        d = np.empty((m, H), np.float32)
        _run(*down, a, d)  # type: ignore[call-arg]
        return h + d

    @njit(cache=True)
    def _attention_moe(
        x, q, K, V, rows, tables, bs, starts, context, pads, scale, fns, wo, ln, eps, router, k, norm, gate_up, down,
        silu, E
    ):  # fmt: skip  # pragma: no cover
        """A Qwen3-MoE block's second half: ``_attention``, then the router's logits, ``routing._route`` and the
        grouped experts (``experts._experts``: gate_up / down their arguments, E experts) -> h + y [m, H]."""
        h, hn = _attention(x, q, K, V, rows, tables, bs, starts, context, pads, scale, fns, wo, ln, eps)
        m = x.shape[0]
        logits = np.empty((m, router[5][0]), np.float32)  # router[5]: the call's output widths (TileCall.args)
        _run(*router, hn, logits)  # type: ignore[call-arg]
        top, weight = np.empty((m, k), np.int64), np.empty((m, k), np.float32)
        _route(logits, k, norm, top, weight)
        return h + _experts(gate_up, down, silu, E, hn, top, weight)


def _call_of(layer: Any) -> TileCall | None:
    """The compiled call a linear layer runs every input on (its tiles, with batch invariance on), else None."""
    tiles = getattr(layer, "tiles", None)
    return tiles.call if tiles is not None and getattr(layer, "invariant", False) else None


class _Plan:
    """What a block's two compiled halves need that does not change between steps."""

    def __init__(self, attn: InvariantAttention, mlp: FusedMLP | None, moe: GroupedMoE | None = None):
        """``mlp`` None: a MoE layer's experts (``moe``, where its router and experts run on the tiles: else in
        Python after the compiled attention)."""
        self.qkv = [attn.qkv.call] if attn.qkv is not None else [_call_of(w) for w in (attn.wq, attn.wk, attn.wv)]
        self.wo = _call_of(attn.wo)
        self.mlp: list[TileCall | None] = []
        self.down: TileCall | None = None
        if mlp is not None:
            self.mlp = [mlp.gate_up.call] if mlp.gate_up is not None else [_call_of(mlp.gate), _call_of(mlp.up)]
            self.down = _call_of(mlp.down)
            self.I = mlp.down.shape[1]
        self.fused_mlp = mlp is not None
        grouped = moe is not None and moe.gate_up is not None and moe.down is not None
        self.router = _call_of(moe.router) if moe is not None and grouped else None
        self.moe = moe if self.router is not None and self.router.ns.size == 1 else None
        calls = [*self.qkv, self.wo, *self.mlp, *([self.down] if mlp is not None else [])]
        self.ok = all(c is not None for c in calls)
        self.n = (attn.nh * attn.D, attn.nkv * attn.D, attn.D)
        self.fns = kernels(attn.D)

    def args(self, calls: list[Any], m: int) -> tuple[tuple[Any, ...], ...]:
        """Every call's arguments for m rows, padded to three with the first (a group's call is the only one run)."""
        got = tuple(c.args(m) for c in calls)
        return got + (got[0],) * (3 - len(got))


_memo = threading.local()  # .tables, .rows: the last step's RoPE tables and their rows, per thread (an engine
# thread and a caller's thread may step two models at once); every layer of a step shares them


def _rope_rows(tables: tuple[np.ndarray, np.ndarray], B: int, S: int) -> tuple[np.ndarray, np.ndarray]:
    """cos / sin for each of the B·S rows [B·S, D/2], as fused.norm_rope broadcasts them."""
    if getattr(_memo, "tables", None) is tables and _memo.rows[0].shape[0] == B * S:
        return _memo.rows  # type: ignore[no-any-return]
    cos, sin = tables
    half = cos.shape[-1]
    rows = cos.shape[0] if cos.ndim == 4 else 1
    got = tuple(np.ascontiguousarray(np.broadcast_to(t.reshape(rows, S, half), (B, S, half)).reshape(B * S, half))
                for t in (cos, sin))  # fmt: skip
    for t in got:  # read-only always (one row's are the tables' own broadcast view): one compiled _attention_in
        t.flags.writeable = False
    _memo.tables, _memo.rows = tables, got
    return got  # type: ignore[return-value]


class CompiledBlock(InvariantBlock):
    """``InvariantBlock`` with its dense-cache and engine steps in two compiled calls (the module docstring)."""

    def __init__(self, w: dict[str, Any], attention: Any, eps: float, mlp: Any = None):
        super().__init__(w, attention, eps, mlp)
        attn, mlp = self.attn, self.mlp
        mine = mlp if isinstance(mlp, FusedMLP) else None  # else a MoE layer's experts
        moe = mlp if isinstance(mlp, GroupedMoE) else None
        plan = _Plan(attn, mine, moe) if HAVE_NUMBA and isinstance(attn, InvariantAttention) else None
        self.plan = plan if plan is not None and plan.ok else None

    def __call__(self, x: np.ndarray, tables: Any, cache: Any = None, pad: np.ndarray | None = None) -> np.ndarray:
        p = self.plan
        covered = cache is None or hasattr(cache, "update_and_fetch_buffers") or isinstance(cache, PagedLayer)
        if p is None or not covered or chunk_window(cache, x.shape[1]) is not None:
            return super().__call__(x, tables, cache, pad)
        return self._compiled(x, tables, cache, pad)

    def _compiled(self, x: np.ndarray, tables: Any, cache: Any, pad: np.ndarray | None) -> np.ndarray:
        p, a = self.plan, self.attn
        assert p is not None and p.wo is not None
        B, S, H = x.shape
        m = B * S
        rows = np.ascontiguousarray(x.reshape(m, H), dtype=np.float32)
        cos, sin = _rope_rows(tables, B, S)
        dtype = np.uint16 if a.kv_bf16 else np.float32
        k, v = np.empty((B, a.nkv, S, a.D), dtype), np.empty((B, a.nkv, S, a.D), dtype)
        eps = np.float32(self.eps)
        q = timed(fan_out, ("block-in", p.n, bucket(m)), _attention_in, rows, self.norm1, eps, p.args(p.qkv, m),
                    len(p.qkv) == 1, p.n, a.q_norm, a.k_norm, cos, sin, k, v)  # fmt: skip
        K, V, seqs = self._kv(k, v, cache, pad)
        key = ("block-out", p.fused_mlp, p.n, bucket(m), bucket(int(seqs[4].max())))
        fns = p.fns if not isinstance(K, tuple) else kernels(a.D, *_code_format(K, a.D))
        seq = rows, q, K, V, *seqs, a.scale, fns
        if p.moe is not None and p.router is not None:  # a MoE layer: router, routing and experts compiled too
            mo = p.moe
            assert mo.gate_up is not None and mo.down is not None
            moe = p.router.args(m), mo.k, mo.normalize, mo.gate_up.args, mo.down.args, mo.silu, len(mo.experts)
            out = timed(fan_out, key, _attention_moe, *seq, p.wo.args(m), self.norm2, eps, *moe)
            return out.reshape(B, S, H)  # type: ignore[no-any-return]
        if not p.fused_mlp:  # a MoE layer off the tiles: the compiled attention, then its experts in Python
            h, hn = timed(fan_out, key, _attention, *seq, p.wo.args(m), self.norm2, eps)
            return h.reshape(B, S, H) + self.mlp(hn.reshape(B, S, H))  # type: ignore[no-any-return]
        assert p.down is not None
        mlp = self.norm2, eps, p.args(p.mlp, m), len(p.mlp) == 1, p.I, silu_kernel(p.I), p.down.args(m)
        out = timed(fan_out, key, _attention_out, *seq, p.wo.args(m), *mlp)  # time_matmuls counts each half
        return out.reshape(B, S, H)  # type: ignore[no-any-return]

    def _kv(self, k: np.ndarray, v: np.ndarray, cache: Any, pad: np.ndarray | None) -> tuple[Any, Any, tuple[Any, ...]]:
        """The new K/V [B, nkv, S, D] into the cache; (K, V as the attention reads them, where each sequence's
        keys are: rows, block tables, block size, query starts, context lengths, left padding - attention.py's
        ``_attend_impl`` names them)."""
        i64 = np.int64
        a = self.attn
        assert isinstance(a, InvariantAttention)  # a block has a plan only then (_Plan)
        if isinstance(cache, PagedLayer):  # the engine's block pool: B = 1, the N tokens of every sequence in a row
            st, bt = cache.store, cache.batch
            a.write_pool(cache, k[0], v[0])  # codes for a pool of codes (the engine's kv_bits)
            n = len(bt.context)
            K, V = (_contiguous(lead(side)) for side in (st.k[cache.layer], st.v[cache.layer]))
            at = np.asarray(bt.starts, i64), np.asarray(bt.context, i64)
            return K, V, (np.zeros(n, i64), np.asarray(bt.tables, i64), i64(st.block_size), *at, np.zeros(n, i64))
        B, _, S, _ = k.shape
        new: tuple[Any, Any] = (k, v)
        if getattr(cache, "bits", 0):  # a QuantizedKVCache: the new positions as codes, its buffers read in place
            new = a.quantize_kv(k, cache), a.quantize_kv(v, cache)
        K, V, T = (*new, S) if cache is None else cache.update_and_fetch_buffers(*new)
        K, V = _contiguous(K), _contiguous(V)  # a dense cache: one block per row
        slots = (K[0] if isinstance(K, tuple) else K).shape[2]
        pads = np.zeros(B, i64) if pad is None else np.asarray(pad, i64).reshape(B)
        seqs = np.arange(B), np.zeros((B, 1), i64), i64(slots), np.arange(0, B * S + 1, S), np.full(B, T), pads
        return K, V, seqs
