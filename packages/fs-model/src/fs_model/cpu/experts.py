"""Qwen3-MoE's experts on the tiles in two kernel calls per layer, whatever the number of experts chosen.

Why: the reference loop (numpy/moe.py) multiplies each chosen expert's three matrices in their own calls. At batch
1 with 8 of 128 experts that is 24 calls per layer, each a few tens of microseconds of which a large part is the
Python around the kernel (preparing the activations, the thread contest, numpy's dispatch) rather than the kernel
itself (measured on Qwen3-30B-A3B's shapes: the compiled loop was 57 % of the layer). Here every chosen expert's
gate and up rows run in one call and their down rows in a second; the activations are prepared once.

The contract is the reference's bits. Each (token, rank) pair becomes one input row of its expert, and every row
goes through exactly the tile chain it would take in that expert's own call (the tiles are batch invariant: a
row's result does not depend on the other rows in a call, tiles.py), so grouping changes the calls, never a bit:

    pairs  = the T·k (token, rank) pairs, sorted by expert (stable)      R = T·k rows
    groups = (expert, first input row, first output row, rows)           int64 [g, 4], one per chosen expert
    gu     = tiles(gate ‖ up)(x[pairs' tokens])    [2R, I]    gate rows at 0.., up rows at R.. (experts E..2E-1)
    h      = silu(gu[:R]) ⊙ gu[R:]                 [R, I]
    d      = tiles(down)(h)                        [R, H]     scattered back to picked [T, k, H], then mixed
                                                              in rank order exactly as the reference mixes

It applies where every expert matrix of the layer runs on the tiles in the same kind, shape and strides (the
experts of one checkpoint do); otherwise the layer keeps the reference loop.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..numpy.linear import Linear, timed
from ..numpy.mlp import MLP, silu
from ..numpy.moe import SparseMoE, route
from . import HAVE_NUMBA
from .threads import bucket, fan_out
from .tile_loops import BLOCK, panel_set
from .tiles import NO_SIDE, Tiled

if HAVE_NUMBA:
    from numba import njit, prange

    from .tile_loops import panels

    @njit(parallel=True, cache=True)
    def _drive_groups(fns, NRs, PW, sw, PS, PB, sg, groups, X, A, out, n, G, P):  # pragma: no cover - compiled
        """Work items are (group, BLOCK weight rows): a group's input rows against its expert's rows lo..hi,
        written at its output rows (``panels``, as ``tile_calls._walk`` runs a matrix's blocks)."""
        px, sx, pa, sa = X.ctypes.data, X.strides[0], A.ctypes.data, A.strides[0]
        po, so = out.ctypes.data, out.strides[0]
        blocks = (n + BLOCK - 1) // BLOCK
        for item in prange(groups.shape[0] * blocks):
            g, blk = item // blocks, item % blocks
            e, first_in, first_out, m = groups[g, 0], groups[g, 1], groups[g, 2], groups[g, 3]
            lo, hi = blk * BLOCK, min(n, blk * BLOCK + BLOCK)
            x, a, o = px + first_in * sx, pa + first_in * sa, po + first_out * so
            panels(fns, NRs, lo, hi, m, PW[e], sw, PS[e], PB[e], sg, x, sx, a, sa, o, so, G, P)


class ExpertTiles:
    """Several matrices of one kind, shape and strides on the tiles, multiplied by groups of rows in one call.

    ``prepare(rows, take)`` -> the activations as the tiles read them (rows[take], with their side data), made
    once per row; ``self(X, side, groups, R) -> [R, n]``, each group's rows against its own matrix."""

    def __init__(self, tables: Sequence[Tiled]):
        t = self.first = tables[0]

        def layout(u: Tiled) -> tuple[Any, ...]:  # what one call's tile functions and address arithmetic assume
            return u.kind, u.n, u.k, u.G, u.weights[1], u.weights[4]

        if any(layout(u) != layout(t) for u in tables):
            raise ValueError("the matrices differ in kind, shape or strides")
        self.tables = list(tables)  # keeps every matrix (and the arrays whose addresses are below) alive
        addresses = np.array([u.weights for u in tables], np.int64)
        self.PW, self.PS, self.PB = (np.ascontiguousarray(addresses[:, j]) for j in (0, 2, 3))
        self.sw, self.sg = t.weights[1], t.weights[4]

    def prepare(self, rows: np.ndarray, take: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        X, side = self.first.prepare(rows)  # per row: gathering afterwards moves the same bits
        if take is None:
            return X, side
        return X[take], side if side is NO_SIDE else side[take]

    def __call__(self, X: np.ndarray, side: np.ndarray, groups: np.ndarray, R: int) -> np.ndarray:
        return timed(self._run, X, side, groups, R)

    def _run(self, X: np.ndarray, side: np.ndarray, groups: np.ndarray, R: int) -> np.ndarray:
        t = self.first
        out = np.empty((R, t.n), np.float32)
        key = ("experts", t.kind, (t.n, t.k), bucket(X.shape[0]))
        one = int(groups[:, 3].max(initial=0)) <= 1  # a batch-1 step: each expert's weights for one row, from memory
        fns, NRs = panel_set(t.fns, t.NRs, 1 if one else X.shape[0])
        fan_out(key, _drive_groups, fns, NRs, self.PW, self.sw, self.PS, self.PB, self.sg, groups, X, side, out,
                t.n, *t.counts)  # fmt: skip
        return out


def expert_tiles(layers: Sequence[Linear]) -> ExpertTiles | None:
    """The layers as one ``ExpertTiles`` where each runs every call on the tiles (batch invariant) alike."""
    tables = [getattr(m, "tiles", None) if getattr(m, "invariant", False) else None for m in layers]
    if not HAVE_NUMBA or any(t is None for t in tables):
        return None
    try:
        return ExpertTiles(tables)  # type: ignore[arg-type]
    except ValueError:
        return None


class GroupedMoE(SparseMoE):
    """``SparseMoE`` with every chosen expert's matrices in two tile calls (the module docstring's contract)."""

    def __init__(self, router: Linear, experts: list[MLP], k: int, normalize: bool):
        super().__init__(router, experts, k, normalize)
        self.gate_up = expert_tiles([e.gate for e in experts] + [e.up for e in experts])
        self.down = expert_tiles([e.down for e in experts])

    def __call__(self, x: np.ndarray) -> Any:
        if self.gate_up is None or self.down is None:
            return super().__call__(x)
        shape, E = x.shape, len(self.experts)
        rows = np.ascontiguousarray(x.reshape(-1, shape[-1]), dtype=np.float32)
        top, weight = route(self.router(rows), self.k, self.normalize)
        flat = top.reshape(-1)
        order = np.argsort(flat, kind="stable")  # the (token, rank) pairs, expert by expert
        chosen, first, count = np.unique(flat[order], return_index=True, return_counts=True)
        R = flat.size
        groups = np.stack([chosen, first, first, count], axis=1).astype(np.int64)
        X, side = self.gate_up.prepare(rows, order // self.k)
        gu = self.gate_up(X, side, np.concatenate([groups, groups + np.array([E, 0, R, 0])]), 2 * R)
        h = silu(gu[:R]) * gu[R:]
        d = self.down(*self.down.prepare(h), groups, R)
        picked = np.empty((R, shape[-1]), np.float32)
        picked[order] = d
        return self.mix(picked.reshape(-1, self.k, shape[-1]), weight).reshape(shape)
