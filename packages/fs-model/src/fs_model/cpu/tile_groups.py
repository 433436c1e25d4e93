"""Several matrices that multiply the same input, in one kernel call: q, k and v of a layer; gate and up.

Why: a decode step's matrices are small enough that each call's fixed cost - the Python layers, preparing the input
(int8 activations per group), waking numba's threads - is a visible share of the step: ~25 µs a call here, and a
0.6B step makes 197 of them. A layer's q/k/v (and gate/up) read the same rows, so one call can quantize them once and
run every matrix's row blocks in one parallel loop: 4 calls a layer instead of 7 (int4 decode at 0.6B shapes: 3 %
faster on the AVX2 host, docs/performance.md).

The bits cannot move: each output element is still computed by its matrix's own tile (tiles.py), over the same row
block, with the same input rows; only which thread runs which block, and in which order, changes.

    group = TileGroup.of([wq, wk, wv])   # None unless every layer runs the same tile kind for every M
    q, k, v = group(x_rows)              # each [M, n_i] float32, as wq(x_rows), wk(x_rows), wv(x_rows)
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import HAVE_NUMBA, tiles
from .threads import bucket, fan_out
from .tile_loops import BLOCK, panel_set
from .tiles import INTEGER, Tiled

if HAVE_NUMBA:
    from numba import njit, prange

    from .tile_loops import panels

    @njit(parallel=True, cache=True)
    def _drive_group(fns, NRs, params, ns, offsets, blocks, X, A, out, G, P):  # pragma: no cover - compiled
        """tile_loops._drive over several matrices: work item b is row block blocks[b] = (matrix, first row) of
        matrix params[i] = (codes, row stride, scales, biases, their row stride), written to out's columns
        offsets[i] .. offsets[i] + ns[i]."""
        m, px, sx = X.shape[0], X.ctypes.data, X.strides[0]
        pa, sa = A.ctypes.data, A.strides[0]
        po, so = out.ctypes.data, out.strides[0]
        for b in prange(blocks.shape[0]):
            i, lo = blocks[b, 0], blocks[b, 1]
            hi = min(ns[i], lo + BLOCK)
            pw, sw, ps, pb, sg = params[i, 0], params[i, 1], params[i, 2], params[i, 3], params[i, 4]
            panels(fns, NRs, lo, hi, m, pw, sw, ps, pb, sg, px, sx, pa, sa, po + offsets[i] * 4, so, G, P)


class TileGroup:
    """Matrices on one tile kind (the same kernels, k, group size and trip counts), called together."""

    def __init__(self, parts: Sequence[Tiled]):
        first = parts[0]
        self.parts, self.fns, self.NRs, self.counts = list(parts), first.fns, first.NRs, first.counts
        self.ns = np.array([p.n for p in parts], np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.ns)[:-1]]).astype(np.int64)
        self.params = np.array([p.weights for p in parts], np.int64)
        # the tiles that read super-block records (tiles.Tiled.chosen), where every part has them alike
        singles = [p.single for p in parts if p.single is not None]
        self.single = None
        if len(singles) == len(parts) and all(fns == singles[0][0] for fns, _ in singles):
            self.single = singles[0][0], np.array([weights for _, weights in singles], np.int64)
        # blocks interleaved (q's first, k's first, v's first, q's second, ...): each thread streams every matrix
        blocks = sorted(((lo, i) for i, p in enumerate(parts) for lo in range(0, p.n, BLOCK)))
        self.blocks = np.array([(i, lo) for lo, i in blocks], np.int64)
        self.N = int(self.ns.sum())
        self.key = ("tile-group", first.kind, tuple((p.n, p.k) for p in parts))

    @classmethod
    def of(cls, layers: Sequence[Any]) -> "TileGroup | None":
        """The group of ``layers`` when each one runs its tiles for every input (batch invariance on), all run the
        same kernels, and those take int8 activations; else None (the caller calls them one by one). Measured
        (benchmarks/tile_groups.py): the int8 kinds gain, quantizing the rows once instead of per matrix; the float
        kinds (bf16, q8, q4) prepare nothing costly and came out even, within noise, so they stay one by one."""
        if not HAVE_NUMBA or not all(getattr(la, "invariant", False) for la in layers):
            return None
        tiled = [t for t in (getattr(la, "tiles", None) for la in layers) if isinstance(t, Tiled)]
        if len(tiled) != len(layers):
            return None
        first = tiled[0]
        if first.kind not in INTEGER:
            return None
        same = all((t.kind, t.k, t.G, t.counts, t.fns) == (first.kind, first.k, first.G, first.counts, first.fns)
                   for t in tiled)  # fmt: skip
        return cls(tiled) if same else None

    def __call__(self, X: np.ndarray) -> list[np.ndarray]:
        if X.dtype != np.float32 or not X.flags.c_contiguous:
            X = np.ascontiguousarray(X, dtype=np.float32)
        m = X.shape[0]
        Xp, side = self.parts[0].prepare(X)  # the same preparation every part would make of X
        out = np.empty((m, self.N), np.float32)
        fns, params = self.single if self.single is not None and m <= tiles.RECORD_ROWS else (self.fns, self.params)
        fan_out((self.key, bucket(m)), _drive_group, *panel_set(fns, self.NRs, m), params, self.ns, self.offsets,
                self.blocks, Xp, side, out, *self.counts)  # fmt: skip
        cols = [out[:, a : a + n] for a, n in zip(self.offsets, self.ns, strict=True)]
        return cols if m == 1 else [np.ascontiguousarray(c) for c in cols]
