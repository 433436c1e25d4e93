"""A matrix call compiled whole: the input rows prepared as the tile kind reads them, then every block of weight
rows walked over them (``tile_loops.panels``), in one numba call.

Why: a 0.6B decode step makes 141 matrix calls, and each one spent ~16 µs in Python outside its tiles (quantizing
the rows to int8 and arranging them, allocating the side data, picking the tiles for M, reshaping): 2.3 ms of a
21.7 ms Q4_K_M step (Zen 4), where llama.cpp's whole step is 15.8. Here the preparation is compiled into the
call, and what depends only on the matrix and on M is built once (``TileCall.args``).

What a kind reads (``PREP``, decided once per matrix by ``tiles.Tiled``):

    NONE        X itself, float32                              bf16, bf16w (float32 activations)
    BF16        X rounded to bf16 bits (``fused.to_bf16``)      bf16d (bf16_dot_tiles.py)
    INT8        int8 per group of G, [scales | sums] per row   q4i, q8i, q4iw, q5i, q6i… (integer_tiles.py)
    ARRANGED    INT8 with each 256-block's groups in the planes' order (vnni_superblock.arrange)   q4iw32
    SUMS        X, and each row's group sums (the bias term)   q8, q4, q8w, q4w (float_tiles.py)

Every step is the one the Python path made, on the same values, so no bit moves (the tile tests compare both).
One call may cover several matrices that read the same rows (a layer's q/k/v, gate/up: tile_groups.py); a single
matrix is a group of one. Work item b is ``items[b] = (matrix i, first weight row, first input row, input rows,
first output column, first output row)``: BLOCK weight rows of matrix i against that run of X's rows (-1 rows: all
of them), written from that output row and column. A group's matrix i fills out's columns ``offsets[i] ..
offsets[i] + ns[i]`` for every row; a MoE layer's experts (compiled_experts.py) give each expert its own rows.

    call = TileCall(prep, G, (fns, NRs, params), single, ns, counts)
    call(key, X) -> out [m, Σ ns] float32       # = fan_out(key, _run, *call.args(m), X, out)
"""

from collections.abc import Hashable, Sequence

import numpy as np

from . import HAVE_NUMBA
from .threads import fan_out
from .tile_loops import BLOCK, FETCHING_ROWS, panel_set

NONE, BF16, INT8, ARRANGED, SUMS = range(5)
# The calls that read a K-quant's super-block records (tiles.RECORD_KINDS) rather than float32 scales and biases: one
# row. Computing each scale costs arithmetic that only pays where the step is bound by memory (a 38k x 1024 Q6_K
# matrix from memory: 1 row 1.41x faster, 2 rows even, 4+ 0.91-0.94x; in cache 0.65-0.90x; docs/performance.md)
RECORD_ROWS = 1

if HAVE_NUMBA:
    from numba import njit, prange

    from .fused import _to_bf16
    from .integer_tiles import _quantize_rows
    from .tile_loops import _group_sums, panels

    @njit(parallel=True, cache=True)
    def _walk(fns, NRs, params, ns, items, m, px, sx, pa, sa, po, so, G, P):  # pragma: no cover - compiled
        """Every item of ``items`` against its input rows of the m at address px (as the tiles read them, row
        stride sx; their per-row side data at pa, stride sa), into the float32 rows at po (stride so). Addresses, not
        arrays: one compiled loop serves every kind's prepared rows (numba would compile one per array type)."""
        for b in prange(items.shape[0]):
            i, lo, r0, rows, col, o0 = items[b, 0], items[b, 1], items[b, 2], items[b, 3], items[b, 4], items[b, 5]
            rows = m if rows < 0 else rows
            hi = min(ns[i], lo + BLOCK)
            pw, sw, ps, pb, sg = params[i, 0], params[i, 1], params[i, 2], params[i, 3], params[i, 4]
            x, a, o = px + r0 * sx, pa + r0 * sa, po + o0 * so + col * 4
            panels(fns, NRs, lo, hi, rows, pw, sw, ps, pb, sg, x, sx, a, sa, o, so, G, P)

    @njit(cache=True)
    def _alive(*arrays):  # pragma: no cover - compiled
        """A use after ``_walk``: numba frees an array after its last use, and ``_walk`` only saw its address."""
        return len(arrays)

    @njit(cache=True)
    def _arrange(xq, out):  # pragma: no cover - compiled
        """vnni_superblock.arrange compiled: group 4a + 2b + c of each 256 weights goes to 4a + 2c + b."""
        for r in range(xq.shape[0]):
            for blk in range(xq.shape[1] // 256):
                for g in range(8):
                    a, b, c = g // 4, (g // 2) % 2, g % 2
                    src, dst = blk * 256 + g * 32, blk * 256 + (4 * a + 2 * c + b) * 32
                    for j in range(32):  # (a loop: a slice assignment costs seconds of compilation)
                        out[r, dst + j] = xq[r, src + j]

    @njit(cache=True)
    def _run(prep, G, fns, NRs, params, ns, items, outer, inner, X, out):  # pragma: no cover - compiled
        """out [m, Σ ns] = the matrices' tiles over X [m, k] float32 (both C-contiguous), prepared by ``prep``."""
        m, k = X.shape
        walk = fns, NRs, params, ns, items, m
        po, so = out.ctypes.data, out.strides[0]
        none = np.zeros((1, 1), np.float32)  # side data of the kinds that read none
        if prep == BF16:
            xb = np.empty((m, k), np.uint16)
            _to_bf16(X.reshape(-1).view(np.uint32), xb.reshape(-1))
            _walk(*walk, xb.ctypes.data, xb.strides[0], none.ctypes.data, 0, po, so, outer, inner)
            _alive(xb, none, out)
        elif prep in (INT8, ARRANGED):
            ng = k // G
            xq, side = np.empty((m, k), np.int8), np.empty((m, 2 * ng), np.float32)
            _quantize_rows(X, G, xq, side[:, :ng], side[:, ng:])
            if prep == ARRANGED:
                xa = np.empty((m, k), np.int8)
                _arrange(xq, xa)
                xq = xa
            _walk(*walk, xq.ctypes.data, xq.strides[0], side.ctypes.data, side.strides[0], po, so, outer, inner)
            _alive(xq, side, out)
        elif prep == SUMS:
            sums = np.empty((m, k // G), np.float32)
            _group_sums(X, G, sums)
            _walk(*walk, X.ctypes.data, X.strides[0], sums.ctypes.data, sums.strides[0], po, so, outer, inner)
            _alive(X, sums, out)
        else:
            _walk(*walk, X.ctypes.data, X.strides[0], none.ctypes.data, 0, po, so, outer, inner)
            _alive(X, none, out)


Tiles = tuple[tuple[int, ...], tuple[int, ...], np.ndarray]  # (tile addresses, NRs, params [matrices, 5])


class TileCall:
    """The compiled call of some matrices on one tile kind, everything but the input rows built once.

    ``tiles``: (the kind's eight tile addresses, its four NRs, per matrix (weights, row stride, scales, biases,
    their row stride)); ``single``: the same for calls of one row where other tiles serve them (a K-quant's
    super-block records: tiles.Tiled.chosen), else None."""

    def __init__(
        self, prep: int, G: int, tiles: Tiles, single: Tiles | None, ns: Sequence[int], counts: tuple[int, int]
    ):
        self.ns = np.array(ns, np.int64)
        self.offsets = offsets = np.concatenate([[0], np.cumsum(self.ns)[:-1]]).astype(np.int64)
        # matrix after matrix, each one's blocks in order: prange hands each thread one run of them, so a thread
        # streams one matrix at a time. Interleaving the matrices block by block (q's first, k's first, v's first,
        # q's second, ...) made every thread switch streams every 8-16 KiB: a Qwen3-0.6B int4 decode step took
        # 1.02-1.08x as long, a gate | up pair from memory 1.1-1.3x (Zen 5, 2026-12-07). Any order gives the same
        # bits: an element is one item's, computed by one fixed chain.
        order = [(i, lo) for i, n in enumerate(ns) for lo in range(0, n, BLOCK)]
        self.items = np.array([(i, lo, 0, -1, offsets[i], 0) for i, lo in order], np.int64).reshape(-1, 6)
        self.N = int(self.ns.sum())

        def args(t: Tiles, m: int) -> tuple[object, ...]:
            fns, NRs = panel_set(t[0], t[1], m)
            params = np.ascontiguousarray(t[2], np.int64)
            return prep, G, fns, NRs, params, self.ns, self.items, *counts

        # a call of one row; of a few (every panel prefetching: tile_loops.FETCHING_ROWS); of more
        self.one, self.few, self.many = args(tiles, 1), args(tiles, 2), args(tiles, FETCHING_ROWS + 1)
        self.records = (args(single, 1), args(single, 2)) if single is not None else None

    def __call__(self, key: Hashable, X: np.ndarray) -> np.ndarray:
        """X [m, k] float32 (C-contiguous) -> [m, N] float32, on the thread count ``key``'s contest chose."""
        m = X.shape[0]
        out = np.empty((m, self.N), np.float32)
        fan_out(key, _run, *self.args(m), X, out)
        return out

    def args(self, m: int) -> tuple[object, ...]:
        """``_run``'s arguments before the input and output, for a call of ``m`` rows."""
        if self.records is not None and m <= RECORD_ROWS:
            return self.records[0] if m == 1 else self.records[1]
        return self.one if m == 1 else self.few if m <= FETCHING_ROWS else self.many
