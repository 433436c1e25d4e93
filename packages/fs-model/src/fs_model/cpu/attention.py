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
equality contracts). The arithmetic is attention_tiles.py's register tiles, which read bf16 bits and a quantized
cache's codes as they load them (attention_codes.py: the floats a dequantized copy holds); where the IR does not
apply, numba loops read a tile widened into a float32 buffer (``attention_reads._tile``). Decode rows that share
a prefix's blocks walk those blocks together, each shared tile read once (attention_groups.py), with the same bits.
Speed: ``benchmarks/attention.py``.
"""

import sys
from typing import Any

import numpy as np

from ..errors import ModelError
from . import HAVE_NUMBA
from .attention_calls import QUERIES, TILE, kernels
from .threads import bucket, fan_out

if HAVE_NUMBA:
    from numba import njit, prange

    from .attention_calls import CODED, CODED_QUERIES, _bf16, _coded, _scores_tile, _weighted_tile
    from .attention_groups import _group_head, _groups
    from .attention_reads import _heads, _query_out, _query_weights, _rows, _scratch, _tile, _tile_end

    # No fastmath in this module: attention is also compiled as a callee of compiled_block.py's halves, and a
    # fast-math sum, max or multiply-add may be vectorized or contracted differently there than in a direct call
    # (a bf16 cache's kernel compiled one way and a float32 one the other differed in the last bit). Strict float32
    # arithmetic gives every caller, and every process reading the other's on-disk cache, the same bits.

    @njit(cache=True)
    def _one_head(q, K, V, r, g, G, trow, bs, T, S, first, pad, raw, fns, scale, sbits, out):  # pragma: no cover
        """``_attend_impl``'s work for one sequence and KV head g: groups of up to QUERIES queries, each group's
        scores tile by tile, its weights, its weighted sums tile by tile, its outputs (scratch arrays per call)."""
        D = q.shape[2]
        s, p, o, buf, mb, lanes = _scratch(min(S, QUERIES) * G, T, D)
        for q0 in range(0, S, QUERIES):  # a group of queries walks the keys together
            q1 = min(S, q0 + QUERIES)
            Tq = T - S + q1  # the group's last query sees keys 0 .. Tq-1
            start = 0 if pad >= T - S + q0 + 1 else pad  # the first visible key of any of them
            # codes are dequantized in the IR once per query that reads them, into buf once for all: the IR pays
            # up to CODED_QUERIES queries (the same bits either way: attention_codes.py's contract)
            direct = raw and (not _coded(K) or q1 - q0 <= CODED_QUERIES)
            t0 = start
            while t0 < Tq:  # a tile is contiguous: it ends where the next block is not the next in memory
                t1 = _tile_end(trow, bs, t0, min(Tq, t0 + TILE))
                at = trow[t0 // bs] * bs + t0 % bs
                if direct:  # the IR widens bf16 bits or dequantizes codes as it reads them
                    kt = _rows(K, r, g, at, t1 - t0)
                    _scores_tile(fns, q, first, g, G, kt, t0, t1, q0, q1, S, T, pad, s, scale, sbits)
                else:
                    kt = _tile(K, r, g, at, t1 - t0, buf)
                    _scores_tile(fns, q, first, g, G, kt, t0, t1, q0, q1, S, T, pad, s, scale, sbits)
                t0 = t1
            for qi in range(q0, q1):
                Ti = T - S + qi + 1  # causal: this query sees keys 0 .. T-S+qi
                blind = pad >= Ti  # every key masked: equal scores, so a uniform average
                lo = 0 if blind else pad
                for j in range((qi - q0) * G, (qi - q0 + 1) * G):
                    _query_weights(fns, s, p, j, lo, Ti, blind, mb, lanes)
            o[:] = 0.0
            t0 = start
            while t0 < Tq:
                t1 = _tile_end(trow, bs, t0, min(Tq, t0 + TILE))
                at = trow[t0 // bs] * bs + t0 % bs
                if direct:
                    _weighted_tile(fns, _rows(V, r, g, at, t1 - t0), G, t0, t1, q0, q1, S, T, pad, p, o)
                else:
                    _weighted_tile(fns, _tile(V, r, g, at, t1 - t0, buf), G, t0, t1, q0, q1, S, T, pad, p, o)
                t0 = t1
            for qi in range(q0, q1):
                Ti = T - S + qi + 1
                lo = 0 if pad >= Ti else pad
                for j in range(G):
                    _query_out(fns, p, o, (qi - q0) * G + j, lo, Ti, mb, lanes, out, first + qi, g * G + j)

    def _attend_impl(q, K, V, rows, tables, bs, starts, context, pads, scale, fns, out):  # pragma: no cover - compiled
        """The queries of n sequences, one after another: q/out [N, nh, D], sequence i's at rows starts[i] ..
        starts[i+1]-1, for positions context[i]-len .. context[i]-1, each over the keys up to its own position.
        K/V [R, nkv, slots, D] (float32, bf16 bits or a quantized triple; widened a tile at a time): sequence i
        reads K[rows[i]], its position t at slot tables[i, t // bs] * bs + t % bs - a block pool read in place, or a
        dense cache [B, nkv, capacity, D] with one block per row. The G = nh/nkv query heads of a kv head share each
        K and V row read. Keys before pads[i] are invisible (all invisible: a uniform average, as the reference's
        finite mask gives). Up to QUERIES queries of a sequence (a prefill chunk, a speculative verify) walk the
        keys together, tile by tile, each taking the keys of a tile it sees: a tile is read (and widened, where the
        IR does not read bf16 bits itself) once for all of them. ``fns``: attention_tiles.kernels(D).

        Per query: the scores of its visible keys (``_scores``), their max, the weights exp(s - max)
        (``_weights``) and their sum, the weighted sum of values (``_weighted``), divided by the sum. Each step's
        arithmetic for a key or an output lane is the same whatever the batch, the blocks, where the call starts
        and how much padding its row has: a token attended in a prefill, in an engine step beside other sequences,
        or alone in a decode step gets the same bits (batch invariance)."""
        nkv = _heads(K)
        G = q.shape[1] // nkv
        # bf16 rows and codes straight to the IR, not via buf
        raw = (fns[0] != 0 and _bf16(_rows(K, 0, 0, 0, 0))) or (fns[CODED] != 0 and _coded(K))
        bits = np.empty(2, np.float32)
        bits[0] = scale
        sbits = np.int64(bits.view(np.int32)[0])
        lead, shared = _groups(rows, tables, bs, starts, context, pads)  # decode steps sharing a prefix's blocks
        items = np.flatnonzero(lead == np.arange(lead.shape[0]))  # a sequence alone, or a group's first
        for ig in prange(items.shape[0] * nkv):
            i, g = items[ig // nkv], ig % nkv
            r, T, S, first = rows[i], context[i], starts[i + 1] - starts[i], starts[i]
            if shared[i] > 0:  # attention_groups.py: the shared tiles read once for every member
                members = np.flatnonzero(lead == i)
                _group_head(
                    q, K, V, r, g, G, tables, members, bs, shared[i], starts, context, raw, fns, scale, sbits, out
                )
            else:
                _one_head(q, K, V, r, g, G, tables[i], bs, T, S, first, pads[i], raw, fns, scale, sbits, out)

    _attend = njit(parallel=True, cache=True)(_attend_impl)


def _contiguous(K: Any) -> Any:
    """A cache's K or V as the kernel reads it: one array, or a quantized cache's (codes as bytes, scales,
    biases) - the codes' uint32 words viewed as their bytes (no copy), which ``_dequantize`` reads."""
    if not isinstance(K, tuple):
        return np.ascontiguousarray(K)
    codes, scales, biases = (np.ascontiguousarray(a) for a in K)
    if sys.byteorder != "little":  # pragma: no cover - every CPU fs runs on today is little-endian
        raise ModelError("the quantized-cache kernels read codes as little-endian bytes; set FS_REFERENCE_PATH=1")
    return codes.view(np.uint8), scales, biases


def _code_format(K: Any, D: int) -> tuple[int, int]:
    """(bits, group size) of a quantized cache as ``_contiguous`` gives it (codes as bytes), (0, 0) of any other."""
    if not isinstance(K, tuple):
        return 0, 0
    return 8 * K[0].shape[-1] // D, D // K[1].shape[-1]


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
    i64 = np.int64  # (asarray: no copy of what is int64 already; a decode step's call costs ~5 µs outside the kernel)
    pads = np.zeros(n, i64) if pads is None else np.asarray(pads, i64).reshape(n)
    q = np.ascontiguousarray(q, dtype=np.float32)
    out = np.empty_like(q)
    key = ("attend", q.shape, n, bucket(int(context.max())))  # the work grows with T: a contest per doubling
    args = (q, _contiguous(K), _contiguous(V), np.asarray(rows, i64), np.asarray(tables, i64))
    fns = kernels(q.shape[2], *_code_format(args[1], q.shape[2]))
    tail = (np.asarray(starts, i64), np.asarray(context, i64), pads, np.float32(scale), fns, out)
    fan_out(key, _attend, *args, i64(block_size), *tail)
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
