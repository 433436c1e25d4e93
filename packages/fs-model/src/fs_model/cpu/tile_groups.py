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

from . import HAVE_NUMBA
from .threads import bucket
from .tiles import INTEGER, Tiled


class TileGroup:
    """Matrices on one tile kind (the same kernels, k, group size and trip counts), called together."""

    def __init__(self, parts: Sequence[Tiled]):
        first = parts[0]
        self.parts = list(parts)
        self.call = first.calls(self.parts)  # one compiled call: the rows prepared once (tile_calls.py)
        self.ns, self.offsets, self.N = self.call.ns, self.call.offsets, self.call.N
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
        out = self.call((self.key, bucket(m)), X)
        cols = [out[:, a : a + n] for a, n in zip(self.offsets, self.ns, strict=True)]
        return cols if m == 1 else [np.ascontiguousarray(c) for c in cols]
