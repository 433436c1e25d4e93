"""The compiled loops that walk a call's rows over the register tiles (tiles.py): which tile covers which block of
weight rows and which panel of input rows, every tile called through its raw address.

Why their own module: they are the same for every tile kind and every caller (one matrix, ``Tiled``; several,
tile_groups.py; grouped experts, experts.py), and only the tile functions they are handed differ.

    panels(fns, NRs, lo, hi, m, ...)      # input rows 0..m-1 against weight rows lo..hi (a work item; tile_calls.py)
    panel_set(fns, NRs, m) -> (fns, NRs)  # the tiles a call of m rows walks
"""

import numpy as np

from . import HAVE_NUMBA

BLOCK = 16  # weight rows per parallel work item (a thread's share is whole blocks)
# Calls of at most this many rows prefetch the weights in every 4-row panel, not only the first (tiles.QUIET): a
# decode batch's later panels find the block in cache, but their prefetches (PREFETCH bytes ahead: the next block)
# keep memory busy while they compute. Qwen3-0.6B bf16's 196 layer matrices from memory, bf16d, best of 9 interleaved
# (Zen 5, 2026-12-07): 8 rows 27.4-28.0 -> 25.6-25.9 ms, 12 rows 32.6 -> 30.5, 16 rows 38.8 -> 37.5; 32 rows even,
# 128 rows 174 -> 184 (the quiet tile's case: a prefill chunk, compute-bound).
FETCHING_ROWS = 16


if HAVE_NUMBA:
    from numba import njit

    from .llvm_ir import call_address as _call  # the tile at an address, the 13 int64 arguments of the ABI

    @njit(cache=True)
    def _group_sums(X, G, out):  # pragma: no cover - compiled
        """out[r, g] = Σ X[r, gG : (g+1)G], left to right (no fastmath: the same bits for a row in any call)."""
        for r in range(X.shape[0]):
            for g in range(out.shape[1]):
                s = np.float32(0.0)
                for j in range(g * G, (g + 1) * G):
                    s += X[r, j]
                out[r, g] = s

    @njit(cache=True)
    def _panel(tile, edge, NR, lo, hi, pw, sw, ps, pb, sg, px, sx, pa, sa, po, so, G, P):  # pragma: no cover
        """One panel of input rows against weight rows lo..hi: NR-row tiles, then one-row edges."""
        i = lo
        while i + NR <= hi:
            _call(tile, (pw + i * sw, sw, ps + i * sg, pb + i * sg, sg, px, sx, pa, sa, po + i * 4, so, G, P))  # type: ignore[call-arg]
            i += NR
        while i < hi:
            _call(edge, (pw + i * sw, sw, ps + i * sg, pb + i * sg, sg, px, sx, pa, sa, po + i * 4, so, G, P))  # type: ignore[call-arg]
            i += 1

    @njit(cache=True)
    def panels(fns, NRs, lo, hi, m, pw, sw, ps, pb, sg, px, sx, pa, sa, po, so, G, P):  # pragma: no cover
        """Input rows 0..m-1 (at px, their side data at pa, their outputs at po) against weight rows lo..hi: panels
        of 4 rows, then 2, then 1 (every tile computes each element by the same chain); 4-row panels after the
        first take the tile ``panel_set`` gave as the last of ``fns`` (a quiet one where the call has more than
        FETCHING_ROWS rows: tiles.QUIET). ``fns``/``NRs``: what ``panel_set`` gives for m rows."""
        t4, e4, t2, e2, t1, e1, q4 = fns
        N4, N2, N1 = NRs
        r = 0
        while r + 4 <= m:
            t = t4 if r == 0 else q4
            _panel(t, e4, N4, lo, hi, pw, sw, ps, pb, sg, px + r * sx, sx, pa + r * sa, sa, po + r * so, so, G, P)
            r += 4
        if r + 2 <= m:
            _panel(t2, e2, N2, lo, hi, pw, sw, ps, pb, sg, px + r * sx, sx, pa + r * sa, sa, po + r * so, so, G, P)
            r += 2
        if r < m:
            _panel(t1, e1, N1, lo, hi, pw, sw, ps, pb, sg, px + r * sx, sx, pa + r * sa, sa, po + r * so, so, G, P)


def panel_set(fns: tuple[int, ...], NRs: tuple[int, ...], m: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(tiles, NRs) that ``panels`` walks for a call of ``m`` rows, from ``kernels``' ten addresses and TILES' four
    NRs: the 4-, 2- and 1-row panels, where a call of one row takes its own tile as its 1-row panel (TILES says
    why), and last the tile of the 4-row panels after the first: the quiet twin in a call of more than
    FETCHING_ROWS rows, else the one hinting the next block (column_tiles.LEAD) or the first panel's own. Chosen
    here, per call, so the compiled ``panels`` loop is the one every call ran before. Every tile gives each element
    the same bits."""
    if m == 1:
        return fns[:4] + fns[6:9], NRs[:2] + NRs[3:]
    return fns[:6] + (fns[8:9] if m > FETCHING_ROWS else fns[9:10]), NRs[:3]
