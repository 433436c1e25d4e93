"""How attention reads a cache: a tile of keys or values as stored or widened to float32, the end of a tile over a
block table, and one query's softmax steps over its row of scores - shared by attention.py's per-sequence walk and
attention_groups.py's walk of a prefix several sequences share, so both give a query the same bits.

    _scratch(rows, T, D) -> (s, p, o, buf, mb, lanes)      # a walk's scratch arrays
    _rows(K, r, g, at, n) / _tile(K, r, g, at, n, buf)   # positions at .. at+n-1 of head g of row r
    _tile_end(trow, bs, t0, most)                        # where the tile starting at key t0 ends
    _query_weights(fns, s, p, j, lo, Ti, blind, mb, lanes)    # p[j, lo:Ti] = exp(s - max)
    _query_out(fns, p, o, row, lo, Ti, mb, lanes, out, i, h)  # out[i, h] = o[row] / Σ p[row, lo:Ti]
"""

import numpy as np

from . import HAVE_NUMBA

if HAVE_NUMBA:
    from numba import njit, types
    from numba.extending import overload

    from .attention_calls import PAD, TILE, _weights
    from .attention_codes import _dequantize
    from .llvm_ir import call_address

    # No fastmath here, as in attention.py (its comment says why).

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

    def _rows(K, r, g, at, n):  # pragma: no cover - replaced by the overload below
        return K

    @overload(_rows)
    def _rows_overload(K, r, g, at, n):  # pragma: no cover - compiled
        """Positions at .. at+n-1 of head g of K[r] as stored (a quantized triple: its codes, scales and biases)."""
        if isinstance(K, types.BaseTuple):
            return lambda K, r, g, at, n: (K[0][r, g, at : at + n], K[1][r, g, at : at + n], K[2][r, g, at : at + n])
        return lambda K, r, g, at, n: K[r, g, at : at + n]

    def _heads(K):  # pragma: no cover - replaced by the overload below
        return K.shape[1]

    @overload(_heads)
    def _heads_overload(K):  # pragma: no cover - compiled
        if isinstance(K, types.BaseTuple):
            return lambda K: K[0].shape[1]
        return lambda K: K.shape[1]

    @njit(cache=True)
    def _scratch(rows, T, D):  # pragma: no cover - compiled
        """One walk's scratch for ``rows`` query heads over T keys: scores s and weights p (PAD floats past a row's
        end: the kernels store whole vectors), weighted sums o (zeros), a widened tile, a max and sum, 16 lanes."""
        s = np.empty((rows, T + PAD), np.float32)
        p = np.empty((rows, T + PAD), np.float32)
        o = np.zeros((rows, D), np.float32)
        return s, p, o, np.empty((TILE, D), np.float32), np.empty(2, np.float32), np.empty(16, np.float32)

    @njit(cache=True)
    def _lanes_max(x, lo, hi, acc):  # pragma: no cover - compiled
        """max(x[lo:hi]) over 16 lanes (exact in any order: the same value as a loop's); acc: 16 floats of scratch."""
        for j in range(16):
            acc[j] = x[lo]
        t = lo
        while t + 16 <= hi:
            for j in range(16):
                acc[j] = max(acc[j], x[t + j])
            t += 16
        for u in range(t, hi):
            acc[0] = max(acc[0], x[u])
        return acc.max()

    @njit(cache=True)
    def _lanes_sum(x, lo, hi, acc):  # pragma: no cover - compiled
        """Σ x[lo:hi] in one written-down order: lane j adds x[lo + j], x[lo + 16 + j], ...; the tail goes to lane 0;
        then the lanes in pairs (0+1, 2+3, ...), repeated (16 independent chains: as fast as a vectorized sum, with
        no reassociation left to the compiler); acc: 16 floats of scratch."""
        for j in range(16):
            acc[j] = 0.0
        t = lo
        while t + 16 <= hi:
            for j in range(16):
                acc[j] += x[t + j]
            t += 16
        for u in range(t, hi):
            acc[0] += x[u]
        w = 16
        while w > 1:
            w //= 2
            for j in range(w):
                acc[j] = acc[2 * j] + acc[2 * j + 1]
        return acc[0]

    @njit(cache=True)
    def _tile_end(trow, bs, t0, most):  # pragma: no cover - compiled
        """The end of the tile starting at key t0 (at most ``most``): the end of t0's block, extended over each
        following block stored right after it (a pool hands out free blocks in increasing order, so a sequence's
        blocks mostly are: 16-key blocks then cost what one dense run does - a tile's calls cost ~0.7 µs a head, a
        third of the work at 16 keys). Where tiles end moves no bit: each key's arithmetic is the same in any tile."""
        end = (t0 // bs + 1) * bs
        while end < most and trow[end // bs] == trow[end // bs - 1] + 1:
            end += bs
        return min(end, most)

    @njit(cache=True)
    def _query_weights(fns, s, p, j, lo, Ti, blind, mb, lanes):  # pragma: no cover - compiled
        """Row j of the scores s: its max over keys lo .. Ti-1 into mb[0], p[j, lo:Ti] = exp(s - max); ``blind`` (every
        key masked): equal scores first, so a uniform average."""
        if blind:
            s[j, lo:Ti] = 0.0
        if fns[10] != 0:  # the row's max in IR (softmax_tiles.row_reduce), else the lanes loop
            at = np.int64(s.ctypes.data) + (j * s.shape[1] + lo) * 4
            call_address(fns[10], (at, np.int64(Ti - lo), np.int64(mb.ctypes.data)))  # type: ignore[call-arg]
        else:
            mb[0] = _lanes_max(s[j], lo, Ti, lanes)
        _weights(fns, s, p, j, lo, Ti - lo, mb[0], np.int64(mb.view(np.int32)[0]))

    @njit(cache=True)
    def _query_out(fns, p, o, row, lo, Ti, mb, lanes, out, i, h):  # pragma: no cover - compiled
        """out[i, h] = o[row] / the sum of p[row, lo:Ti] (its weights)."""
        if fns[11] != 0:
            at = np.int64(p.ctypes.data) + (row * p.shape[1] + lo) * 4
            call_address(fns[11], (at, np.int64(Ti - lo), np.int64(mb.ctypes.data) + 4))  # type: ignore[call-arg]
            tot = mb[1]
        else:
            tot = _lanes_sum(p[row], lo, Ti, lanes)
        for d in range(o.shape[1]):
            out[i, h, d] = o[row, d] / tot
