"""Grouped-query attention over a KV cache, compiled: the one kernel every numba-path step attends with.

Why its own kernel: numpy's attention (numpy/attention.py, the reference) materialises the scores of every query
against every key and widens a bf16 or quantized cache whole; here a step reads the cache in place, a tile of
positions at a time, and the G = nh / nkv query heads of a KV head share each key and value row it reads.

    attend(q [B, nh, D] or [B, nh, S, D], K, V [B, nkv, slots, D], T, scale, pad) -> q's shape   # a dense cache
    attend_rows(q [N, nh, D], K, V, rows, tables, block_size, starts, context, scale) -> [N, nh, D]  # a block pool

K and V are float32, bf16 bits (uint16) or a quantized cache's (codes, scales, biases). The contract is batch
invariance: a query's arithmetic is one loop over its visible keys in increasing order, whatever the batch, the
blocks, the padding or how its sequence was chunked, so a token attended in a prefill, in an engine step or alone
in a decode step gets the same bits (tested against the reference in test_fused.py, test_paged_step.py and by the
equality contracts). Its speed (``benchmarks/attention.py``, docs/performance.md): ~16-17 GFLOP/s a thread at 0.6B
shapes on a Zen 4 core, spread over the scores, the weighted sum, the bf16 widening and exp alike; a faster kernel
needs the accumulators in registers, which the matrix tiles get from hand-written LLVM IR.
"""

import sys
from typing import Any

import numpy as np

from ..errors import ModelError
from . import HAVE_NUMBA
from .threads import bucket, fan_out

if HAVE_NUMBA:
    from numba import njit, prange, types
    from numba.extending import overload

    @njit(fastmath=True, cache=True)
    def _dequantize(codes, scales, biases, r, g, at, n, dst, t):  # pragma: no cover - compiled
        """Positions at .. at+n-1 of head g of a quantized cache row r into dst[t .. t+n-1] as float32:
        ``scale * code + bias`` per group. ``codes`` is the uint32 codes' byte view (``_contiguous``): on a
        little-endian CPU code d of an 8-bit row is byte d, of a 4-bit row the low (even d) or high nibble of byte
        d/2, of a 2-bit row bits 2(d%4) of byte d/4. A group at a time with the width fixed, so the loops vectorise
        (a loop over packed words with a variable shift measured 3x slower)."""
        D = dst.shape[1]
        bits = 8 * codes.shape[3] // D
        ng = scales.shape[3]
        gs = D // ng
        for i in range(n):
            row = codes[r, g, at + i]
            out = dst[t + i]
            for grp in range(ng):
                sc, bi = scales[r, g, at + i, grp], biases[r, g, at + i, grp]
                lo = grp * gs
                if bits == 8:
                    for d in range(gs):
                        out[lo + d] = sc * np.float32(row[lo + d]) + bi
                elif bits == 4:
                    for e in range(gs // 2):
                        byte = row[lo // 2 + e]
                        out[lo + 2 * e] = sc * np.float32(byte & np.uint8(15)) + bi
                        out[lo + 2 * e + 1] = sc * np.float32(byte >> np.uint8(4)) + bi
                else:
                    for e in range(gs // 4):
                        byte = row[lo // 4 + e]
                        for j in range(4):
                            out[lo + 4 * e + j] = sc * np.float32((byte >> np.uint8(2 * j)) & np.uint8(3)) + bi

    def _tile(K, r, g, at, n, buf):  # pragma: no cover - replaced by the overload below inside compiled code
        return buf

    @overload(_tile)
    def _tile_overload(K, r, g, at, n, buf):  # pragma: no cover - compiled
        """Positions at .. at+n-1 of head g of K[r] as float32 rows [n, D]: float32 rows as they are, bf16 bits
        widened into ``buf`` in one flat (vectorised) loop - widening row by row measured 1.4× slower - and a
        quantized cache's triple (codes, scales, biases) dequantized into ``buf``."""
        if isinstance(K, types.BaseTuple):

            def dequantized(K, r, g, at, n, buf):
                _dequantize(K[0], K[1], K[2], r, g, at, n, buf, 0)
                return buf[:n]

            return dequantized
        if K.dtype == types.uint16:

            def widened(K, r, g, at, n, buf):
                rows = K[r, g, at : at + n]
                m = n * rows.shape[1]
                src, dst = rows.reshape(m), buf.reshape(-1)[:m].view(np.uint32)
                for i in range(m):
                    dst[i] = np.uint32(src[i]) << np.uint32(16)
                return buf[:n]

            return widened
        return lambda K, r, g, at, n, buf: K[r, g, at : at + n]

    def _heads(K):  # pragma: no cover - replaced by the overload below
        return K.shape[1]

    @overload(_heads)
    def _heads_overload(K):  # pragma: no cover - compiled
        if isinstance(K, types.BaseTuple):
            return lambda K: K[0].shape[1]
        return lambda K: K.shape[1]

    def _gather(K, r, g, trow, bs, T, out):  # pragma: no cover - replaced by the overload below
        return out

    @overload(_gather)
    def _gather_overload(K, r, g, trow, bs, T, out):  # pragma: no cover - compiled
        """Positions 0 .. T-1 of head g of K[r] (through the block row ``trow``) into ``out`` [T, D] as float32, a
        block run at a time: a prefill's queries then read each key once widened, not once per query."""
        if isinstance(K, types.BaseTuple):

            def dequantized(K, r, g, trow, bs, T, out):
                t = 0
                while t < T:
                    n = min(T - t, bs - t % bs)
                    _dequantize(K[0], K[1], K[2], r, g, trow[t // bs] * bs + t % bs, n, out, t)
                    t += n
                return out

            return dequantized
        if K.dtype == types.uint16:

            def widened(K, r, g, trow, bs, T, out):
                D = out.shape[1]
                dst = out.reshape(-1).view(np.uint32)
                t = 0
                while t < T:
                    n = min(T - t, bs - t % bs)
                    at = trow[t // bs] * bs + t % bs
                    src = K[r, g, at : at + n].reshape(n * D)
                    for x in range(n * D):
                        dst[t * D + x] = np.uint32(src[x]) << np.uint32(16)
                    t += n
                return out

            return widened

        def copied(K, r, g, trow, bs, T, out):
            t = 0
            while t < T:
                n = min(T - t, bs - t % bs)
                at = trow[t // bs] * bs + t % bs
                out[t : t + n] = K[r, g, at : at + n]
                t += n
            return out

        return copied

    def _attend_impl(q, K, V, rows, tables, bs, starts, context, pads, scale, out):  # pragma: no cover - compiled
        """The queries of n sequences, one after another: q/out [N, nh, D], sequence i's at rows starts[i] ..
        starts[i+1]-1, for positions context[i]-len .. context[i]-1, each over the keys up to its own position.
        K/V [R, nkv, slots, D] (float32, bf16 bits or a quantized triple; widened a tile at a time): sequence i
        reads K[rows[i]], its
        position t at slot tables[i, t // bs] * bs + t % bs - a block pool read in place, or a dense cache
        [B, nkv, capacity, D] with one block per row. The G = nh/nkv query heads of a kv head share each K and V
        row read. Keys before pads[i] are invisible (all invisible: a uniform average, as the reference's finite
        mask gives). Several queries (a prefill chunk) widen the history once into float32 rows (``_gather``); one
        query (a decode step) widens a tile at a time - the same float32 values either way.

        Each query's arithmetic is the same loop over its visible keys in increasing order, whatever the batch,
        the blocks, where the call starts and how much padding its row has: a token attended in a prefill, in an
        engine step beside other sequences, or alone in a decode step gets the same bits (batch invariance)."""
        nh, D = q.shape[1], q.shape[2]
        nkv = _heads(K)
        G = nh // nkv
        TILE = 64
        for ig in prange(context.shape[0] * nkv):
            i, g = ig // nkv, ig % nkv
            r, T, S = rows[i], context[i], starts[i + 1] - starts[i]
            s = np.empty((G, T), np.float32)
            m = np.empty(G, np.float32)
            buf = np.empty((TILE, D), np.float32)
            o = np.empty((G, D), np.float32)
            tot = np.empty(G, np.float32)
            whole = S > 1
            Kw = np.empty((T if whole else 0, D), np.float32)
            Vw = np.empty((T if whole else 0, D), np.float32)
            if whole:
                _gather(K, r, g, tables[i], bs, T, Kw)
                _gather(V, r, g, tables[i], bs, T, Vw)
            for qi in range(S):
                Ti = T - S + qi + 1  # causal: this query sees keys 0 .. T-S+qi
                blind = pads[i] >= Ti  # every key masked: equal scores, so a uniform average
                lo = 0 if blind else pads[i]
                qr = starts[i] + qi
                m[:] = -np.inf
                t0 = lo
                while t0 < Ti:  # tiles end at block ends: a tile is contiguous
                    t1 = min(Ti, t0 + TILE, (t0 // bs + 1) * bs)
                    if whole:
                        kt = Kw[t0:t1]
                    else:
                        at = tables[i, t0 // bs] * bs + t0 % bs
                        kt = _tile(K, r, g, at, t1 - t0, buf)
                    for t in range(t1 - t0):
                        k = kt[t]
                        for j in range(G):
                            qj = q[qr, g * G + j]
                            acc = np.float32(0.0)
                            for d in range(D):
                                acc += qj[d] * k[d]
                            acc = np.float32(0.0) if blind else acc * scale
                            s[j, t0 + t] = acc
                            m[j] = max(m[j], acc)
                    t0 = t1
                o[:] = 0.0
                tot[:] = 0.0
                t0 = lo
                while t0 < Ti:
                    t1 = min(Ti, t0 + TILE, (t0 // bs + 1) * bs)
                    if whole:
                        vt = Vw[t0:t1]
                    else:
                        at = tables[i, t0 // bs] * bs + t0 % bs
                        vt = _tile(V, r, g, at, t1 - t0, buf)
                    for t in range(t1 - t0):
                        v = vt[t]
                        for j in range(G):
                            p = np.exp(s[j, t0 + t] - m[j])
                            tot[j] += p
                            for d in range(D):
                                o[j, d] += p * v[d]
                    t0 = t1
                for j in range(G):
                    for d in range(D):
                        out[qr, g * G + j, d] = o[j, d] / tot[j]

    _attend = njit(parallel=True, fastmath=True, cache=True)(_attend_impl)


def _contiguous(K: Any) -> Any:
    """A cache's K or V as the kernel reads it: one array, or a quantized cache's (codes as bytes, scales,
    biases) - the codes' uint32 words viewed as their bytes (no copy), which ``_dequantize`` reads."""
    if not isinstance(K, tuple):
        return np.ascontiguousarray(K)
    codes, scales, biases = (np.ascontiguousarray(a) for a in K)
    if sys.byteorder != "little":  # pragma: no cover - every CPU fs runs on today is little-endian
        raise ModelError("the quantized-cache kernels read codes as little-endian bytes; set FS_REFERENCE_PATH=1")
    return codes.view(np.uint8), scales, biases


def attend_rows(
    q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    rows: np.ndarray,
    tables: np.ndarray,
    block_size: int,
    starts: np.ndarray,
    context: np.ndarray,
    scale: np.float32,
    pads: np.ndarray | None = None,
) -> np.ndarray:
    """Attention for the queries of n sequences packed one after another (q [N, nh, D] -> [N, nh, D]); the
    arguments as ``_attend_impl`` names them. K and V are read in place: pass a pool's or a cache's own buffers."""
    n = context.shape[0]
    pads = np.zeros(n, np.int64) if pads is None else np.asarray(pads, np.int64).reshape(n)
    q = np.ascontiguousarray(q, dtype=np.float32)
    out = np.empty_like(q)
    key = ("attend", q.shape, n, bucket(int(context.max())))  # the work grows with T: a contest per doubling
    i64 = np.int64
    args = (q, _contiguous(K), _contiguous(V), rows.astype(i64), tables.astype(i64))
    fan_out(key, _attend, *args, i64(block_size), starts.astype(i64), context.astype(i64), pads, scale, out)
    return out


def attend(
    q: np.ndarray, K: np.ndarray, V: np.ndarray, T: int, scale: np.float32, pad: np.ndarray | None
) -> np.ndarray:
    """q [B, nh, D] (one query per row, at position T-1) or [B, nh, S, D] (S queries at T-S .. T-1) over the first T
    positions of a dense cache's K/V [B, nkv, >=T, D]; the output has q's shape. K and V are read in place: pass a
    cache's own buffers (``DenseKVCache.update_and_fetch_buffers``), not a strided view of them."""
    q4 = q if q.ndim == 4 else q[:, :, None]
    B, nh, S, D = q4.shape
    rows = np.arange(B, dtype=np.int64)
    starts = np.arange(0, B * S + 1, S, dtype=np.int64)
    context = np.full(B, T, np.int64)
    flat = q4.transpose(0, 2, 1, 3).reshape(B * S, nh, D)
    slots = (K[0] if isinstance(K, tuple) else K).shape[2]
    out = attend_rows(flat, K, V, rows, np.zeros((B, 1), np.int64), slots, starts, context, scale, pad)
    out = out.reshape(B, S, nh, D).transpose(0, 2, 1, 3)
    return out if q.ndim == 4 else out[:, :, 0]
