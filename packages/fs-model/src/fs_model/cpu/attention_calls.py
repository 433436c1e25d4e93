"""Which attention kernels a head size runs, and the compiled calls into them (attention.py walks the cache and
calls these; attention_tiles.py writes the kernels' IR).

    kernels(D, bits, gs) -> int64 array of code addresses (all 0: the numba loops below run instead)
    _scores_tile / _weighted_tile: every query of a group against one tile of keys it sees
    _scores / _weights / _weighted: one query's G heads, through the IR or the loops
    _scores_coded / _weighted_coded: the same over a quantized tile (codes, scales, biases), through the IR

The decision (``lanes``) is made here once per head size: 16 lanes on AVX-512, 8 on AVX2, none elsewhere or for a
head size the vectors do not divide (the loops, whose arithmetic differs but is just as batch invariant: a model
takes one or the other for every call).
"""

import ctypes

import numpy as np

from . import FEATURES, HAVE_NUMBA, SWITCHES, attention_codes
from .attention_tiles import DECLARATIONS, _suffix, scores, weighted
from .llvm_ir import compile_ir
from .softmax_tiles import exp_shifted, row_reduce
from .tiles import WIDE_FEATURES  # the matrix tiles' 16-lane set: attention goes wide where they do

TILE = 64  # keys a tile: widened once (without the IR: bf16, codes) into a buffer that stays in L1
QUERIES = 16  # queries of one sequence that walk the keys together, each tile read once for all of them
PAD = 16  # the IR kernels store whole vectors: up to 15 floats past a row's last key

_compiled: dict[tuple[int, ...], np.ndarray] = {}
NONE: tuple[int, ...] = (0,) * 16
CODED = 12  # where a table's kernels over codes start (scores_2, scores_1, weighted_2, weighted_1)
# The most queries walking the keys together for which attention reads codes in the IR rather than from a tile
# dequantized once into a buffer (each query's kernels dequantize again): 0.6B heads, 1,024-4,096 keys, one thread,
# 2026-12-07 Zen 5 (benchmarks/attention.py --cache 8 / 4): 1 query 1.4-1.7x faster from the codes, 2 about even
# (0.9-1.1x), 3 0.75-1.0x, 6 0.55-0.7x
CODED_QUERIES = 2


def lanes(D: int) -> int:
    """The vector width attention runs on for heads of D values: 16 on AVX-512 (``FS_WIDE_TILES`` on), 8 on AVX2,
    0 where the IR kernels do not apply (no AVX2 + FMA, ``FS_TILES=0``, or D not a multiple of the width) and
    attention.py's numba loops run instead. Decided here, once per head size, like the matrix tiles' width."""
    if not SWITCHES.tiles or not FEATURES.issuperset(("avx2", "fma")):
        return 0
    if D % 16 == 0 and SWITCHES.wide_tiles and FEATURES.issuperset(WIDE_FEATURES):
        return 16
    return 8 if D % 8 == 0 else 0


FOUR = ("scores_2", "scores_1", "weighted_2", "weighted_1")


def _chunks(D: int, W: int) -> int:
    """The W-lane chunks of D one weighted call covers: its accumulators stay in registers."""
    return max(c for c in range(1, min(D // W, 8 if W == 16 else 4) + 1) if (D // W) % c == 0)


def _four(D: int, W: int, kv: str) -> tuple[str, list[str]]:
    """The IR of the scores / weighted kernels over keys and values stored as ``kv``, and their names."""
    NK = 8 if W == 16 else 4  # keys a scores step: NK·R accumulators and NK key chunks fit the registers
    if kv not in ("f32", "bf16"):  # codes: each key's scale and bias per group take registers too - the compiled
        NK //= 2  # loop spilled to the stack at 8 / 4 keys (101 / 176 instructions a key; 83 / 150 at 4 / 2)
    C = _chunks(D, W)
    ir = scores(2, D, W, NK, kv) + scores(1, D, W, NK, kv) + weighted(2, C, W, kv) + weighted(1, C, W, kv)
    return ir, [f"{n}{_suffix(kv)}" for n in FOUR]


def _addresses(ir: str, W: int, names: list[str]) -> dict[str, int] | None:
    """{name: code address} of the functions ``names`` of ``ir``, compiled for W lanes (None: it did not compile)."""
    sig = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 8)  # only their addresses are used (numba calls them)
    fns = compile_ir(DECLARATIONS + ir, WIDE_FEATURES if W == 16 else ("avx2", "fma"), dict.fromkeys(names, sig))
    return None if fns is None else {n: ctypes.cast(f, ctypes.c_void_p).value or 0 for n, f in fns.items()}


def kernels(D: int, bits: int = 0, gs: int = 0) -> np.ndarray:
    """(scores_2, scores_1, weighted_2, weighted_1, exp_shifted, the lanes of D one weighted call covers, then the
    four scores / weighted kernels again, reading bf16 bits, then a row's max and sum: ``row_reduce``, then - for a
    cache of ``bits``-bit codes in groups of ``gs`` - the four again reading the codes, else 0s) as raw code
    addresses for heads of D values, compiled once; all 0 where ``lanes`` says the IR does not apply (the codes'
    four also where a group is not whole chunks: attention.py then widens the codes into a buffer). An int64 array
    of 16, read-only (one array type for every call: numba compiles one variant of each caller; and it types an
    array at a call faster than a tuple)."""
    W = lanes(D)
    key = (D, W, bits, gs)
    if key not in _compiled:
        got: tuple[int, ...] = NONE
        if bits:  # the table without codes, and the four over codes compiled on their own
            base = tuple(int(a) for a in kernels(D)[:CODED])
            got = (*base, 0, 0, 0, 0)  # no lanes (W = 0: no IR at all) or no whole chunks: the numba loops
            if W and base[0] and attention_codes.applies(W, gs):
                ir, names = _four(D, W, attention_codes.kind(bits, gs))
                at = _addresses(ir, W, names)
                got = (*base, *(at[n] for n in names)) if at else got
        elif W:
            (f32, names), (bf16, bf16_names) = _four(D, W, "f32"), _four(D, W, "bf16")
            ir = exp_shifted(W) + row_reduce(W, "max") + row_reduce(W, "sum") + f32 + bf16
            at = _addresses(ir, W, ["exp_shifted", "row_max", "row_sum", *names, *bf16_names])
            if at is not None:
                got = (*(at[n] for n in names), at["exp_shifted"], _chunks(D, W) * W, *(at[n] for n in bf16_names),
                       at["row_max"], at["row_sum"], 0, 0, 0, 0)  # fmt: skip
        table = np.array(got, np.int64)
        table.flags.writeable = False
        _compiled[key] = table
    return _compiled[key]


if HAVE_NUMBA:
    from numba import njit, types
    from numba.extending import overload

    from .llvm_ir import call_address

    def _bf16(rows):  # pragma: no cover - replaced by the overload below
        return False

    @overload(_bf16)
    def _bf16_overload(rows):  # pragma: no cover - compiled
        """True (a constant of the type) for rows of bf16 bits: the IR kernels' ``_bf16`` variants read them."""
        bits = isinstance(rows, types.Array) and rows.dtype == types.uint16
        return lambda rows: bits

    def _coded(K):  # pragma: no cover - replaced by the overload below
        return False

    @overload(_coded)
    def _coded_overload(K):  # pragma: no cover - compiled
        """True (a constant of the type) for a quantized cache's (codes, scales, biases)."""
        coded = isinstance(K, types.BaseTuple)
        return lambda K: coded

    def _span(kt, a, b):  # pragma: no cover - replaced by the overload below
        return kt

    @overload(_span, inline="always")
    def _span_overload(kt, a, b):  # pragma: no cover - compiled
        """Rows a .. b-1 of a tile: of an array, or of each of a quantized tile's codes, scales and biases."""
        if isinstance(kt, types.BaseTuple):
            return lambda kt, a, b: (kt[0][a:b], kt[1][a:b], kt[2][a:b])
        return lambda kt, a, b: kt[a:b]

    @njit(cache=True)
    def _scales_from(kt, d0, D):  # pragma: no cover - compiled
        """The tail of a kernel's arguments over codes from dim d0 on: scales and biases, address and row stride."""
        sc, bi = kt[1], kt[2]
        at = d0 // (D // sc.shape[1]) * 4  # d0 starts a group, or lies inside the one group a call reads
        i64 = np.int64
        return i64(sc.ctypes.data) + at, i64(sc.strides[0]), i64(bi.ctypes.data) + at, i64(bi.strides[0])

    @njit(fastmath=True, cache=True, inline="always")
    def _score_calls(fns, at, qg, k, ks, n, s, t0, bits, tail):  # pragma: no cover - compiled
        """Every head of qg [G, D] against n keys at address k (row stride ks), two heads a call: the IR kernels
        fns[at] (two heads) and fns[at + 1] (one); ``tail``: the arguments kernels over codes take after the rest."""
        G, D = qg.shape
        i64 = np.int64
        j = 0
        while j < G:
            R = 2 if j + 2 <= G else 1
            qa, sa = i64(qg.ctypes.data) + j * D * 4, i64(s.ctypes.data) + (j * s.shape[1] + t0) * 4
            call_address(fns[at + 2 - R], (qa, i64(D * 4), k, ks, i64(n), sa, i64(s.strides[0]), bits, *tail))  # type: ignore[call-arg]
            j += R

    @njit(fastmath=True, cache=True, inline="always")
    def _weighted_calls(fns, at, p, t0, v, vs, n, o, d0, tail):  # pragma: no cover - compiled
        """o[j, d0 ..] += the weighted sum of n values at address v (row stride vs) for every head j of o, two heads
        a call: the IR kernels fns[at] / fns[at + 1], ``fns[5]`` lanes from d0; ``tail`` as ``_score_calls``'."""
        G, D = o.shape
        i64 = np.int64
        j = 0
        while j < G:
            R = 2 if j + 2 <= G else 1
            pa, oa = i64(p.ctypes.data) + (j * p.shape[1] + t0) * 4, i64(o.ctypes.data) + (j * D + d0) * 4
            call_address(fns[at + 2 - R], (pa, i64(p.strides[0]), v, vs, i64(n), oa, i64(D * 4), *tail))  # type: ignore[call-arg]
            j += R

    @njit(fastmath=True, cache=True)
    def _scores_coded(fns, qg, kt, n, s, t0, scale, bits):  # pragma: no cover - compiled
        """``_scores`` over a quantized tile (codes, scales, biases): attention_codes' kernels."""
        codes, i64 = kt[0], np.int64
        k, ks = i64(codes.ctypes.data), i64(codes.strides[0])
        _score_calls(fns, CODED, qg, k, ks, n, s, t0, bits, _scales_from(kt, 0, qg.shape[1]))

    @njit(fastmath=True, cache=True)
    def _weighted_coded(fns, p, t0, vt, n, o):  # pragma: no cover - compiled
        """``_weighted`` over a quantized tile: ``fns[5]`` lanes a call, each call's codes and scales from its d0."""
        D = o.shape[1]
        codes, i64 = vt[0], np.int64
        for d0 in range(0, D, fns[5]):
            va = i64(codes.ctypes.data) + d0 * codes.shape[1] // D
            _weighted_calls(fns, CODED + 2, p, t0, va, i64(codes.strides[0]), n, o, d0, _scales_from(vt, d0, D))

    @njit(fastmath=True, cache=True)
    def _scores(fns, qg, kt, n, s, t0, scale, bits):  # pragma: no cover - compiled
        """s[j, t0 + t] = scale · (qg[j] · kt[t]) for t < n and every query head j of qg [G, D] (kt: n float32 rows,
        or bf16 bits where ``fns`` has kernels): attention_tiles' scores, two heads a call, where ``fns`` has them;
        else a loop (heads attention_tiles does not take). Either way a key's score does not depend on the call."""
        G, D = qg.shape
        if fns[0] == 0:
            for t in range(n):
                for j in range(G):
                    acc = np.float32(0.0)
                    for d in range(D):
                        acc += qg[j, d] * kt[t, d]
                    s[j, t0 + t] = acc * scale
            return
        i64 = np.int64
        _score_calls(fns, 6 if _bf16(kt) else 0, qg, i64(kt.ctypes.data), i64(kt.strides[0]), n, s, t0, bits, ())

    @njit(fastmath=True, cache=True)
    def _weights(fns, s, p, j, lo, n, m, mbits):  # pragma: no cover - compiled
        """p[j, lo + t] = exp(s[j, lo + t] - m) for t < n (attention_tiles' polynomial where ``fns`` has it)."""
        if fns[4] == 0:
            for t in range(lo, lo + n):
                p[j, t] = np.exp(s[j, t] - m)
            return
        at = np.int64((j * s.shape[1] + lo) * 4)
        call_address(fns[4], (np.int64(s.ctypes.data) + at, np.int64(n), mbits, np.int64(p.ctypes.data) + at))  # type: ignore[call-arg]

    @njit(fastmath=True, cache=True)
    def _weighted(fns, p, t0, vt, n, o):  # pragma: no cover - compiled
        """o[j] += Σ_t p[j, t0 + t] · vt[t] for t < n, every head j of o [G, D]: one chain per output lane, keys in
        increasing order (attention_tiles' weighted, two heads a call, ``fns[5]`` lanes of D at a time)."""
        G, D = o.shape
        if fns[2] == 0:
            for t in range(n):
                for j in range(G):
                    pj = p[j, t0 + t]
                    for d in range(D):
                        o[j, d] += pj * vt[t, d]
            return
        i64 = np.int64
        for d0 in range(0, D, fns[5]):
            va = i64(vt.ctypes.data) + d0 * vt.itemsize
            _weighted_calls(fns, 2 + (6 if _bf16(vt) else 0), p, t0, va, i64(vt.strides[0]), n, o, d0, ())

    def _scores_of(fns, qg, kt, n, s, t0, scale, bits):  # pragma: no cover - replaced by the overload below
        pass

    @overload(_scores_of, inline="always")
    def _scores_of_overload(fns, qg, kt, n, s, t0, scale, bits):  # pragma: no cover - compiled
        """``_scores`` or, for a quantized tile, ``_scores_coded`` (chosen by the tile's type, when compiling)."""
        if isinstance(kt, types.BaseTuple):
            return lambda fns, qg, kt, n, s, t0, scale, bits: _scores_coded(fns, qg, kt, n, s, t0, scale, bits)
        return lambda fns, qg, kt, n, s, t0, scale, bits: _scores(fns, qg, kt, n, s, t0, scale, bits)

    def _weighted_of(fns, p, t0, vt, n, o):  # pragma: no cover - replaced by the overload below
        pass

    @overload(_weighted_of, inline="always")
    def _weighted_of_overload(fns, p, t0, vt, n, o):  # pragma: no cover - compiled
        """``_weighted`` or, for a quantized tile, ``_weighted_coded``."""
        if isinstance(vt, types.BaseTuple):
            return lambda fns, p, t0, vt, n, o: _weighted_coded(fns, p, t0, vt, n, o)
        return lambda fns, p, t0, vt, n, o: _weighted(fns, p, t0, vt, n, o)

    @njit(fastmath=True, cache=True)
    def _visible(t0, t1, qi, S, T, pad):  # pragma: no cover - compiled
        """The keys of tile t0 .. t1-1 query qi (of S, the last at position T-1) sees: (a, b), empty when a >= b."""
        Ti = T - S + qi + 1
        lo = 0 if pad >= Ti else pad
        return max(t0, lo), min(t1, Ti)

    @njit(fastmath=True, cache=True)
    def _scores_tile(fns, q, first, g, G, kt, t0, t1, q0, q1, S, T, pad, s, scale, bits):  # pragma: no cover
        """Every query q0 .. q1-1's scores (its G heads: rows (qi-q0)·G .. of s) against the keys of one tile it
        sees (kt: keys t0 .. t1-1)."""
        for qi in range(q0, q1):
            a, b = _visible(t0, t1, qi, S, T, pad)
            if a < b:
                rows = s[(qi - q0) * G : (qi - q0 + 1) * G]
                qg, ka = q[first + qi, g * G : (g + 1) * G], _span(kt, a - t0, b - t0)
                _scores_of(fns, qg, ka, b - a, rows, a, scale, bits)

    @njit(fastmath=True, cache=True)
    def _weighted_tile(fns, vt, G, t0, t1, q0, q1, S, T, pad, p, o):  # pragma: no cover - compiled
        """Every query q0 .. q1-1's weighted sums (rows of p and o as ``_scores_tile``'s) over one tile's values."""
        for qi in range(q0, q1):
            a, b = _visible(t0, t1, qi, S, T, pad)
            if a < b:
                at = (qi - q0) * G
                _weighted_of(fns, p[at : at + G], a, _span(vt, a - t0, b - t0), b - a, o[at : at + G])
