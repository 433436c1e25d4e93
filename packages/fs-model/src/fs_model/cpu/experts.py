"""Qwen3-MoE's chosen experts in one compiled call per layer, whatever the number of experts chosen.

Why: the reference loop (numpy/moe.py) multiplies each chosen expert's three matrices in their own calls. At batch
1 with 8 of 128 experts that is 24 calls per layer, each a few tens of microseconds of which a large part is the
Python around the kernel. Two grouped tile calls (every expert's gate and up rows, then every down row) cut that
to two, but the numpy between them - sorting the (token, rank) pairs, preparing the activations twice, SiLU, the
scatter and the weighted sum - still cost ~8 % of the experts' time (one token through Qwen3-30B-A3B's experts,
int4 and int8, Zen 4: benchmarks/moe_experts.py). Here all of it after the router is one numba call:

    pairs  = the T·k (token, rank) pairs, sorted by expert (stable)      R = T·k rows
    groups = (expert, first pair, rows)                                  one per chosen expert
    gu     = tiles(gate ‖ up)(x[pairs' tokens])    [2R, I]    gate rows at 0.., up rows at R.. (experts E..2E-1)
    h      = silu(gu[:R]) · gu[R:]                 [R, I]     silu_tiles' kernel, as FusedMLP's
    d      = tiles(down)(h)                        [R, H]
    y[t]   = d[pair (t, 0)]·w[t, 0] + d[pair (t, 1)]·w[t, 1] + …   in rank order, as SparseMoE.mix

The contract is the reference loop's bits over the same experts (``FusedMLP``s: their gate | up call, SiLU kernel and
down call). Each pair is one input row of its expert, and every row goes through exactly the tile chain it would
take in that expert's own call (the tiles are batch invariant: a row's result does not depend on the other rows in
a call, tiles.py), so grouping changes the calls, never a bit (tests/test_grouped_experts.py).

It applies where every expert matrix of the layer runs on the tiles in the same kind, shape and strides (the
experts of one checkpoint do); otherwise the layer keeps the reference loop.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..numpy.linear import Linear, timed
from ..numpy.mlp import MLP
from ..numpy.moe import SparseMoE
from . import HAVE_NUMBA
from .decode_step import FusedMLP
from .routing import route
from .silu_tiles import kernel as silu_kernel
from .threads import bucket, fan_out
from .tile_loops import BLOCK, panel_set
from .tiles import Tiled

if HAVE_NUMBA:
    from numba import njit

    from .silu_tiles import _silu_mul
    from .tile_calls import _run

    @njit(cache=True)
    def _items(groups, n, E, R):  # pragma: no cover - compiled
        """``tile_calls._run``'s work items: each group's BLOCK weight rows of its expert e against its own rows,
        written at the same rows of the output; with E > 0 also expert E + e's, written R rows further down."""
        blocks = (n + BLOCK - 1) // BLOCK
        sides = 2 if E > 0 else 1
        items = np.empty((groups.shape[0] * blocks * sides, 6), np.int64)
        b = 0
        for side in range(sides):
            for g in range(groups.shape[0]):
                e, first, rows = groups[g, 0], groups[g, 1], groups[g, 2]
                for blk in range(blocks):
                    items[b, 0], items[b, 1], items[b, 2], items[b, 3] = e + side * E, blk * BLOCK, first, rows
                    items[b, 4], items[b, 5] = 0, first + side * R
                    b += 1
        return items

    @njit(cache=True)
    def _experts(gate_up, down, silu, E, X, top, weight):  # pragma: no cover - compiled
        """y [T, H] for the rows X [T, H] routed to ``top`` [T, k] with ``weight`` [T, k] (the module docstring).
        ``gate_up`` / ``down``: (prep, G, one-row tiles, NRs, many-row tiles, NRs, params, ns, outer, inner)."""
        T, k = top.shape
        H, R = X.shape[1], T * k
        flat = top.reshape(R)
        order = np.argsort(flat, kind="mergesort")  # stable: a token's pairs in rank order within an expert
        at = np.empty(R, np.int64)  # at[pair] = its row among the sorted pairs
        groups = np.empty((R, 3), np.int64)
        ng, most = 0, 0
        for r in range(R):
            at[order[r]] = r
            e = flat[order[r]]
            if ng == 0 or groups[ng - 1, 0] != e:
                groups[ng, 0], groups[ng, 1], groups[ng, 2] = e, r, 0
                ng += 1
            groups[ng - 1, 2] += 1
            most = max(most, groups[ng - 1, 2])
        groups = groups[:ng]
        rows = np.empty((R, H), np.float32)
        for r in range(R):
            src = order[r] // k
            for j in range(H):  # (a loop: a slice assignment costs seconds of compilation)
                rows[r, j] = X[src, j]
        prep, G, f1, N1, fm, Nm, params, ns, outer, inner = gate_up
        fns, NRs = (f1, N1) if most <= 1 else (fm, Nm)  # a batch-1 step: each expert's weights for one row
        I = ns[0]
        gu = np.empty((2 * R, I), np.float32)
        _run(prep, G, fns, NRs, params, ns, _items(groups, I, E, R), outer, inner, rows, gu)
        h = np.empty((R, I), np.float32)
        _silu_mul(silu, gu[:R], gu[R:], h)
        prep, G, f1, N1, fm, Nm, params, ns, outer, inner = down
        fns, NRs = (f1, N1) if most <= 1 else (fm, Nm)
        d = np.empty((R, H), np.float32)
        _run(prep, G, fns, NRs, params, ns, _items(groups, H, 0, 0), outer, inner, h, d)
        y = np.empty((T, H), np.float32)
        for t in range(T):
            p, w = at[t * k], weight[t, 0]
            for j in range(H):
                y[t, j] = d[p, j] * w
            for r in range(1, k):
                p, w = at[t * k + r], weight[t, r]
                for j in range(H):
                    y[t, j] = y[t, j] + d[p, j] * w
        return y


class ExpertTiles:
    """Several matrices of one kind, shape and strides on the tiles: ``args()`` is what ``_experts`` needs to
    multiply groups of rows by them, each group by its own matrix."""

    def __init__(self, tables: Sequence[Tiled]):
        t = self.first = tables[0]

        def layout(u: Tiled) -> tuple[Any, ...]:  # what one call's tile functions and address arithmetic assume
            return u.kind, u.n, u.k, u.G, u.weights[1], u.weights[4], u.fns

        if any(layout(u) != layout(t) for u in tables):
            raise ValueError("the matrices differ in kind, shape, strides or scale storage")
        self.tables = list(tables)  # keeps every matrix (and the arrays whose addresses are below) alive
        params = np.ascontiguousarray(np.array([u.weights for u in tables], np.int64))
        ns = np.full(len(tables), t.n, np.int64)
        one, many = panel_set(t.fns, t.NRs, 1), panel_set(t.fns, t.NRs, 2)
        self.args = (t.prep, t.G, *one, *many, params, ns, *t.counts)


def expert_tiles(layers: Sequence[Linear]) -> ExpertTiles | None:
    """The layers as one ``ExpertTiles`` where each runs every call on the tiles (batch invariant) alike."""
    tables = [getattr(m, "tiles", None) if getattr(m, "invariant", False) else None for m in layers]
    if not HAVE_NUMBA or any(t is None for t in tables):
        return None
    try:
        return ExpertTiles(tables)  # type: ignore[arg-type]
    except ValueError:
        return None


def _fused(e: MLP) -> MLP:
    """An expert as ``FusedMLP`` (gate | up in one call, the SiLU kernel): the loop then gives the grouped bits."""
    return e if isinstance(e, FusedMLP) else FusedMLP({"gate_proj": e.gate, "up_proj": e.up, "down_proj": e.down})


class GroupedMoE(SparseMoE):
    """``SparseMoE`` with every chosen expert in one compiled call (the module docstring's contract), routed by the
    compiled ``routing.route`` (the reference's ranking, its values within rounding: routing.py), the one every fast
    path of the layer calls (compiled_block.py runs router, routing and experts inside the block's second half)."""

    def __init__(self, router: Linear, experts: list[MLP], k: int, normalize: bool):
        super().__init__(router, [_fused(e) for e in experts], k, normalize)
        self.gate_up = expert_tiles([e.gate for e in self.experts] + [e.up for e in self.experts])
        self.down = expert_tiles([e.down for e in self.experts])
        self.silu = silu_kernel(self.down.first.k) if self.down is not None else 0

    def __call__(self, x: np.ndarray) -> Any:
        if self.gate_up is None or self.down is None:
            return super().__call__(x)
        shape = x.shape
        rows = np.ascontiguousarray(x.reshape(-1, shape[-1]), dtype=np.float32)
        top, weight = route(self.router(rows), self.k, self.normalize)
        t = self.gate_up.first
        key = ("experts", t.kind, (t.n, t.k), bucket(rows.shape[0]))
        y = timed(fan_out, key, _experts, self.gate_up.args, self.down.args, self.silu, len(self.experts), rows,
                  np.ascontiguousarray(top), np.ascontiguousarray(weight))  # fmt: skip
        return y.reshape(shape)
