"""Register-tiled, batch-invariant matrix kernels for kept weights (bf16 bits, MLX 8-bit and planar 4-bit codes).

Why: the row kernels (bf16.py, affine.py) compute each output element in its own loop, so a weight row is widened
or dequantized again for every input row and the activations are re-read for every weight row: 8 rows cost 8×
one row for int8 / int4 and 4-5× for bf16 (measured on the 0.6B gate matrix). A register tile of ``NR`` weight
rows × ``MR`` input rows converts each 8-weight chunk once for ``MR`` rows and loads each activation chunk once
for ``NR`` weight rows.

Invariance is kept by construction, in LLVM IR where the arithmetic is explicit (no reassociation flags):

    bf16:   out[r, i] = hsum(acc),         acc ← fma(widen(w[i, c]), x[r, c], acc) over 8-wide chunks c = 0, 1, …
    affine: out[r, i] = hsum(acc) + bsum,  per group g: gacc ← fma(code[i, c], x[r, c], gacc) over its chunks from
            0, then acc ← fma(gacc, scale[i, g], acc) and bsum ← fma(bias[i, g], Σx[r, g], bsum) (4-bit: the low
            then the high nibble plane of each pair of groups); 4-bit with int8 activations: integer_tiles.py
    hsum adds lanes (0..3)+(4..7), then (0,1)+(2,3), then the two; every chain starts at 0.

On a CPU with AVX-512 the float kinds run 16-wide (``bf16w``, ``q8w``, ``q4w``: chunks of 16, an hsum that first
adds lanes (0..7)+(8..15)), and with VNNI the 4-bit integer kind too (``q4iw``; on groups of 32 a kernel of its own,
vnni_superblock.py, with its own ``TILES`` entry: ``tile_key``); with AVX512-BF16, bf16 weights take ``bf16d``
(activations rounded to bf16, ``vdpbf16ps``: bf16_dot_tiles.py); ``widest`` picks the kind once per matrix. Every
tile prefetches its weights ``float_tiles.PREFETCH`` bytes ahead into L2 (a hint: no result changes).

Every tile shape (NR×MR, NR×1, 1×MR, 1×1) computes each element by exactly that chain, so the number of rows in a
call, a row's place in it and the other rows cannot move a bit. The bits differ from the row kernels' (another
order), so one host uses one of the two for every call: tiled where ``applies`` (this CPU has AVX2+FMA, the shape
tiles), else the row kernels.

    Tiled(kind, w)(X) -> [m, n] float32    # kind "bf16"/"bf16w": w uint16 [n, k]; "q8", "q4", …: an AffineWeight
"""

import ctypes
from typing import Any

import numpy as np

from . import (
    FEATURES,
    HAVE_NUMBA,
    SWITCHES,
    bf16_dot_tiles,
    column_records,
    column_tiles,
    float_tiles,
    half_scales,
    integer_tiles,
    packed_codes,
    tile_calls,
    vnni_superblock,
)
from .llvm_ir import ADDRESSES, compile_ir
from .threads import bucket

# Tile shapes per format: (NR weight rows, MR input rows) for panels of 4, 2 and 1 input rows (a call's rows are
# covered by 4-row panels, then a 2-row and a 1-row one: decode batches of 1 and 2 are common), and last the tile a
# call of exactly one row walks. Chosen by measurement on the 0.6B shapes (docs/performance.md): AVX2's 16 vector
# registers hold the NR·MR accumulators beside the NR converted weight chunks and an activation chunk.
#
# Why a call of one row has its own tile: its weights come from memory, a 1-row panel after bigger ones reads a
# block the 4-row panel just loaded. From memory, one weight row at a time (a single sequential stream) is what a
# Zen 4 core prefetches best: NR = 1 streams 0.6B decode matrices at 25-32 GB/s on two threads where 4 or 8 rows
# interleaved (streams 1-2 KiB apart) made 18-26 (benchmarks/tile_streaming.py); from cache, one row is a single
# FMA chain and 4 rows' chains overlap (a 5-row verify pass, benchmarks/speculative.py --parts b: 99.2 ms with 1×1
# there, 83.9 with 4×1). A 16-wide row's chain (64 FMAs per 1024 inputs) outruns memory; the 8-wide AVX2 kinds keep
# their 1-row panel's tile for it.
TILES = {
    "bf16": ((2, 4), (4, 2), (4, 1), (4, 1)),
    "q8": ((2, 4), (4, 2), (4, 1), (4, 1)),
    "q4": ((1, 4), (4, 2), (4, 1), (4, 1)),
    # AVX-512 (16-wide, kinds named with a trailing w; 32 vector registers): measured like the AVX2 ones
    "bf16w": ((4, 4), (4, 2), (4, 1), (1, 1)),
    "bf16d": ((4, 4), (4, 2), (4, 1), (1, 1)),  # bf16 activations on AVX512-BF16 (bf16_dot_tiles.py)
    "bf16di": ((4, 4), (4, 2), (4, 1), (4, 1)),  # the same over rows interleaved per 4: one stream, every call
    "q8w": ((2, 4), (4, 2), (4, 1), (1, 1)),
    "q4w": ((2, 4), (2, 2), (4, 1), (4, 1)),  # 1×1 measured no faster for it
    "q4i": ((1, 4), (2, 2), (2, 1), (2, 1)),  # 4-bit codes with int8 activations (integer_tiles.py); 1×1 even
    "q8i": ((1, 4), (2, 2), (2, 1), (2, 1)),  # 8-bit codes with int8 activations (integer_tiles.py)
    "q4iw": ((3, 4), (4, 2), (8, 1), (1, 1)),  # q4i on AVX-512 VNNI (vpdpbusd, 16 lanes)
    "q4iw32": ((1, 4), (2, 2), (2, 1), (1, 1)),  # q4iw on groups of 32: its own kernel (vnni_superblock.py)
    # 16 output columns in the lanes (column_tiles.py): a tile is a whole work item; its edge is never walked
    "q4ic": ((16, 4), (16, 2), (16, 1), (16, 1)),
    "q5ic": ((16, 4), (16, 2), (16, 1), (16, 1)),  # the same for GGUF's packed 5- and 6-bit codes (packed_columns.py)
    "q6ic": ((16, 4), (16, 2), (16, 1), (16, 1)),
    # GGUF's 5- and 6-bit codes packed, int8 activations (packed_codes.py); a trailing w: AVX-512 VNNI. Measured on
    # 24 distinct 3072×1024 matrices (Zen 4, 2026-12-06): 64 rows q6iw NR 1 / 2 / 3: 2.93 / 2.62 / 2.80 ms, q5iw
    # 2.21 / 2.11 / 2.07; 2 rows NR 1 best for all four; one row NR 1 (NR 2: 1.1-1.4x slower)
    "q5i": ((1, 4), (1, 2), (2, 1), (1, 1)),
    "q5iw": ((2, 4), (1, 2), (2, 1), (1, 1)),
    "q6i": ((1, 4), (1, 2), (2, 1), (1, 1)),
    "q6iw": ((2, 4), (1, 2), (2, 1), (1, 1)),
}
# the kinds with int8 activations (integer_tiles.py, column_tiles.py)
INTEGER = ("q4i", "q8i", "q4iw", *column_tiles.KINDS, *packed_codes.KINDS)
if any(tuple(MR for _, MR in panels) != (4, 2, 1, 1) for panels in TILES.values()):  # ``panels`` assumes it
    raise AssertionError("every TILES entry lists its panels for 4, 2 and 1 input rows and a one-row call's, in order")


# Every tile function's arguments (i64 addresses, strides in bytes, counts): weights, scales, biases and their row
# strides; the input panel and its row stride; per-row side data (int 4-bit: activation scales and sums); the output
# block and its row stride; the outer and inner trip counts.
ABI = ", ".join(
    f"i64 %{a}" for a in ("pw", "sw", "ps", "pb", "sg", "px", "sx", "pa", "sa", "po", "so", "groups", "per_group")
)


_SIG = ctypes.CFUNCTYPE(None, *[ADDRESSES] * 13)
_compiled: dict[tuple[str, int, str | None], tuple[int, ...] | None] = {}
# the kinds that can read a K-quant's super-block records instead of float32 scales and biases (superblock_scales.py);
# the calls that do: tile_calls.RECORD_ROWS
RECORD_KINDS = ("q4i", "q8", "q4", "q8w", "q4w", "q4iw", *column_tiles.KINDS, *packed_codes.KINDS)


def tile_key(kind: str, G: int) -> str:
    """The ``TILES`` entry of a kind on groups of G: its own, except 4-bit groups of 32 on VNNI (another kernel)."""
    return "q4iw32" if kind == "q4iw" and G == vnni_superblock.G else kind


# The kinds with a quiet twin of their 4-row panel's tile: the same arithmetic without the weight prefetches, for
# every 4-row panel after its first of a call of more than tile_loops.FETCHING_ROWS rows (a prefill chunk). The
# first panel brings a work item's weight block from memory (the prefetches are what make that fast:
# tile_streaming, float_tiles.PREFETCH); later panels find it in L2, where each prefetch only takes a load slot: a
# 4×4 ``bf16d`` tile over 128 rows in cache ran 1.02-1.14x faster without them (0.6B shapes, one thread, Zen 5,
# 2026-12-07), while taking them out of every panel cost 5-20 % at 16-32 rows.
QUIET = ("bf16d", "bf16di")


def kernels(kind: str, G: int = 0, layout: str | None = None) -> tuple[int, ...] | None:
    """Per panel (4, 2, 1 input rows, a one-row call): the code addresses of its NR×MR tile and of its 1×MR edge;
    then the 4-row panel's tile for the panels after the first of a call of more than tile_loops.FETCHING_ROWS rows
    (its ``QUIET`` twin, else itself), and of a shorter call (column kinds: the twin hinting the next block,
    column_tiles.LEAD; else itself); compiled once.
    ``layout``: the tiles read super-block records of that layout (a ``RECORD_KINDS`` kind), or 16-bit scales and
    biases, ``"bf16"`` or ``"f16"`` (an affine kind other than the packed 5-/6-bit ones: half_scales.py)."""
    key = (kind, G, layout)
    if key not in _compiled:
        prefix = tile_key(kind, G)
        superblock = prefix == "q4iw32"  # 4-bit groups of 32 on VNNI: its own kernel
        columns = prefix in column_tiles.KINDS  # whole 16-row blocks: the tile is its own edge
        shapes = [s for NR, MR in TILES[prefix] for s in ((NR, MR), (NR if columns else 1, MR))]
        names = [f"{prefix}{'_' + layout if layout else ''}_{a}x{b}" for a, b in shapes]
        if columns:
            names = [column_tiles.name(b, G, layout, column_tiles.KINDS[prefix]) for _, b in shapes]
        unique = dict(zip(names, shapes, strict=True))  # an NR of 1 makes a tile its own edge
        features: tuple[str, ...] = ("avx2", "fma")
        if columns:  # the VNNI body where the CPU has it, else the AVX2 one: the same bits (column_tiles.py)
            MRs = sorted({b for _, b in unique.values()})
            W = 16 if FEATURES.issuperset(VNNI_FEATURES) else 8
            ir = integer_tiles.DECLARATIONS + column_tiles.source(MRs, G, layout, W, column_tiles.KINDS[prefix])
            features = VNNI_FEATURES if W == 16 else features
        elif kind in packed_codes.KINDS:
            vnni = kind.endswith("w")
            ir = integer_tiles.DECLARATIONS + "".join(
                packed_codes.microkernel(a, b, int(kind[1]), vnni, layout) for a, b in unique.values()
            )
            features = VNNI_FEATURES if vnni else features
        elif kind in ("bf16d", "bf16di"):
            il = kind == "bf16di"
            body = (bf16_dot_tiles.microkernel(a, b, interleaved=il) for a, b in unique.values())
            ir = bf16_dot_tiles.DECLARATIONS + "".join(body)
            ir += bf16_dot_tiles.microkernel(*TILES[kind][0], fetch=False, interleaved=il)
            features = bf16_dot_tiles.FEATURES
        elif superblock:
            body = (vnni_superblock.microkernel(a, b, layout) for a, b in unique.values())
            ir = integer_tiles.DECLARATIONS + "".join(body)
            features = VNNI_FEATURES
        elif kind in INTEGER:
            bits, vnni = (8 if kind == "q8i" else 4), kind == "q4iw"
            ir = integer_tiles.DECLARATIONS + "".join(
                integer_tiles.microkernel(a, b, bits, vnni, G or integer_tiles.GROUP, layout)
                for a, b in unique.values()
            )
            features = VNNI_FEATURES if vnni else features
        else:
            W = width(kind)
            base = kind[:-1] if W == 16 else kind
            ir = float_tiles.DECLARATIONS + "".join(
                float_tiles.microkernel(base, a, b, G, W, layout) for a, b in unique.values()
            )
            features = WIDE_FEATURES if W == 16 else features
        features = (*features, *half_scales.FEATURES.get(layout or "", ()))
        names.append(f"{names[0]}q" if kind in QUIET else names[0])
        if columns and column_tiles.LEAD:  # the 4-row tile hinting the next block
            ir += column_tiles.microkernel(TILES[prefix][0][1], G, layout, W, column_tiles.KINDS[prefix], lead=True)
            names.append(column_tiles.name(TILES[prefix][0][1], G, layout, column_tiles.KINDS[prefix], lead=True))
        else:
            names.append(names[0])
        fns = compile_ir(ir, features, dict.fromkeys(names, _SIG))
        # raw addresses: numba calls them through _call (a ctypes object as an argument costs a cast per call)
        _compiled[key] = None if fns is None else tuple(ctypes.cast(fns[n], ctypes.c_void_p).value or 0 for n in names)
    return _compiled[key]


WIDE_FEATURES = ("avx512f", "avx512bw")
VNNI_FEATURES = ("avx512f", "avx512bw", "avx512vnni")


def width(kind: str) -> int:
    """Weights per loop chunk of a tile kind: 32 for ``bf16d`` (one ``vdpbf16ps``), 16 for the other AVX-512 kinds (a
    trailing ``w``), else 8."""
    return bf16_dot_tiles.CHUNK if kind in ("bf16d", "bf16di") else 16 if kind.endswith("w") else 8


def widest(kind: str, k: int, G: int = 0, bf16_activations: bool = True, layout: str | None = None) -> str:
    """The kind a matrix of this format and shape runs as on this CPU: the 16-wide AVX-512 tile where the CPU has
    it, the switch allows it (``FS_WIDE_TILES=0`` keeps AVX2's) and k (and the group) split into 16-float chunks,
    else the 8-wide one; bf16 weights take ``bf16d`` (bf16 activations, bf16_dot_tiles.py) where the CPU has
    AVX512-BF16, k splits into chunks of 32, ``FS_BF16_GEMM`` is on and the caller allows it (``bf16_activations``).
    Decided once per matrix: its width is part of every element's chain. ``layout``: the scales' (``kernels``)."""
    wide = kind + "w"
    bf16d = bf16_activations and SWITCHES.bf16_gemm and k % bf16_dot_tiles.CHUNK == 0
    if kind == "bf16" and SWITCHES.wide_tiles and bf16d:
        wide = "bf16d" if kernels("bf16d") is not None else wide
    if kind not in ("bf16", "q8", "q4", "q4i", "q5i", "q6i") or not SWITCHES.wide_tiles or k % 16 or (G and G % 16):
        return kind
    if kind == "q4i" and G != integer_tiles.GROUP and (G != vnni_superblock.G or k % vnni_superblock.STEP):
        return kind  # groups of 32 take VNNI a super-block (256 weights) per step: vnni_superblock.py
    return wide if kernels(wide, G, layout) is not None else kind


def by_columns(kind: str, n: int, k: int, G: int, layout: str | None = None, records: str | None = None) -> str:
    """The column kind (column_tiles.py: ``q4ic``, ``q5ic``, ``q6ic``) for an int8-activation matrix of 4-, 5- or
    6-bit codes (``q4i`` / ``q4iw``, ``q5i(w)``, ``q6i(w)`` as ``widest`` chose it) whose shape it covers, where the
    CPU compiles it (AVX-512 VNNI, else AVX2) and ``FS_COLUMN_TILES`` allows it; else ``kind``. A K-quant with
    super-block ``records`` (their layout) only where the column tiles read that layout (column_records.py):
    ``FS_SUPERBLOCK_SCALES`` must not change a bit, so the kind may not depend on whether the records are read.
    Decided once per matrix."""
    bits = {"q4i": 4, "q4iw": 4, "q5i": 5, "q5iw": 5, "q6i": 6, "q6iw": 6}.get(kind)
    if bits is None or not SWITCHES.column_tiles or not column_tiles.applies(n, k, G, bits):
        return kind
    if records is not None and records not in column_records.LAYOUTS:
        return kind
    columns = f"q{bits}ic"
    return columns if kernels(columns, G, layout) is not None else kind


def applies(kind: str, k: int, G: int = 0, layout: str | None = None) -> bool:
    """This CPU runs the tiles (AVX2 + FMA; ``FS_TILES=0`` turns them off) and the shape tiles: k a multiple of 8
    (bf16, 8-bit), an even number of groups of a multiple of 16 (planar 4-bit), groups of 64 (int8 activations;
    4-bit codes: 32 too), packed 5-/6-bit codes: their type's group, k a multiple of 64 (packed_codes.py);
    ``layout``: where the scales come from (``kernels``)."""
    if not (HAVE_NUMBA and SWITCHES.tiles):
        return False
    if kind == "q4" and (k % (2 * G) or G % 16):
        return False
    if kind == "q4i" and (G not in integer_tiles.GROUPS_4BIT or k % (2 * G) or not SWITCHES.int8_activations):
        return False
    if kind == "q8i" and (G != integer_tiles.GROUP or k % G or not SWITCHES.int8_activations):
        return False
    packed = kind in ("q5i", "q6i")
    if packed and (packed_codes.GROUP[int(kind[1])] != G or k % packed_codes.BLOCK or not SWITCHES.int8_activations):
        return False
    if k % 8 or (G and G % 8):
        return False
    return kernels(kind, G, layout) is not None


def scale_layout(w: Any) -> str | None:
    """How the tiles read an AffineWeight's scales and biases: "bf16" where they are bf16 bits (uint16), "f16" for
    float16 (half_scales.py), None for float32."""
    return {np.dtype(np.uint16): "bf16", np.dtype(np.float16): "f16"}.get(w.scales.dtype)


def reads_half_scales(kind: str, layout: str, G: int) -> bool:
    """Whether tiles of ``kind`` (as ``widest`` chose it) on groups of G read 16-bit scales of ``layout`` as they are
    (else the layer widens them once, at load). Measured on 24 distinct 3072 × 1024 matrices, one row (Zen 4,
    2026-12-07, ms per matrix float32 / float16 / bf16): the float kinds convert a scalar per group inside their
    group loop, and ``vcvtph2ps`` there made ``q8w`` on groups of 32 slower (0.132 / 0.157 / 0.126), so float16 goes
    to the int8-activation kinds only (``q4iw``: 0.062 / 0.065 / 0.058); the AVX2 integer tile on groups of 32
    (``q4i``, FS_ISA=avx2: 0.078-0.094 / 0.094-0.111 / 0.103-0.104) converts two scalars per 32 code bytes and keeps
    float32 for both."""
    if kind == "q4i" and G == 32:
        return False
    return layout == "bf16" or kind in INTEGER


class Tiled:
    """One matrix on the tiles, everything but the input prepared once: ``Tiled(kind, w)(X) -> [m, n] float32``.

    ``kind`` "bf16": ``w`` is uint16 bf16 bits [n, k]; "q8", "q4", "q4i" (4-bit, int8 activations): an AffineWeight.
    An AffineWeight's bf16 scales and biases are read as they are, by every call (``scale_layout``).
    An AffineWeight with super-block ``records`` (a GGUF K-quant) also gets the tiles that read them where the kind
    can (``RECORD_KINDS``; ``FS_SUPERBLOCK_SCALES=0`` turns them off): the same bits from fewer bytes, taken by calls
    of at most ``tile_calls.RECORD_ROWS`` rows (``single``). Call ``applies`` first."""

    def __init__(self, kind: str, w: Any):
        self.kind, self.w = kind, w  # w keeps the arrays whose addresses are taken below alive
        W = width(kind)
        self.layout: str | None = None
        self.single: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # (fns, weights) reading the records
        scales: str | None = None
        if kind in ("bf16", "bf16w", "bf16d", "bf16di"):
            codes, ps, pb, sg, G, k = w, 0, 0, 0, 0, w.shape[1]
            outer, inner = 1, k // W
        else:
            scales = scale_layout(w)
            codes, G, k = w.codes, w.group_size, w.shape[1]
            ps, pb, sg = w.scales.ctypes.data, w.biases.ctypes.data, w.scales.strides[0]
            outer, inner = (k // (2 * G), G // W) if kind in ("q4", "q4w", "q4i", "q4iw") else (k // G, G // W)
            if kind in column_tiles.KINDS:  # codes, scales and biases laid out per 16 rows, a group a step
                if not w.columns:
                    w = self.w = w.in_columns()
                codes, ps, pb, sg = w.codes, w.scales.ctypes.data, w.biases.ctypes.data, w.scales.strides[0]
                outer, inner = k // G, 1
                if scales == "f16" and half_scales.symmetric(w.scales, w.biases, column_tiles.KINDS[kind]):
                    scales = half_scales.SYMMETRIC  # Q4_0 / Q5_0: the biases follow from the scales, unread
            if tile_key(kind, G) == "q4iw32":  # a super-block of 256 weights per step
                outer = k // vnni_superblock.STEP
            if kind in packed_codes.KINDS:  # packed blocks of 64 weights
                outer = k // packed_codes.BLOCK
            if w.records is not None and kind in RECORD_KINDS and SWITCHES.superblock_scales:
                self.layout, records = w.records
                fns = kernels(kind, G, self.layout)
                assert fns is not None
                at = records.ctypes.data
                self.single = fns, (codes.ctypes.data, codes.strides[0], at, at, records.strides[0])
        fns = kernels(kind, G, scales)
        assert fns is not None
        self.n, self.k, self.G, self.family = codes.shape[0], k, G, tile_key(kind, G)
        self.fns, self.NRs = fns, tuple(NR for NR, _ in TILES[self.family])
        self.weights = (codes.ctypes.data, codes.strides[0], ps, pb, sg)
        if self.single is not None and kind in column_tiles.KINDS:
            # a column tile makes a group's 16 scales once per 16 rows x M inputs: the records cost nothing
            # measurable where a call is bound by arithmetic (3072 x 1024 Q4_K, Zen 5: 1.14-1.25x faster at 2-8
            # rows, even at 64-128; docs/decisions.md), so every call reads them
            (self.fns, self.weights), self.single = self.single, None
        self.counts = (outer, inner)
        self.keys = {m: ("tiles", kind, codes.shape, bucket(m)) for m in range(1, 9)}
        self.prep = (
            tile_calls.BF16 if kind in ("bf16d", "bf16di")
            else tile_calls.ARRANGED if self.family == "q4iw32"
            else tile_calls.INT8 if kind in INTEGER
            else tile_calls.SUMS if kind in ("q8", "q4", "q8w", "q4w")
            else tile_calls.NONE
        )  # fmt: skip
        self.call = self.calls([self])

    def calls(self, parts: "list[Tiled]") -> "tile_calls.TileCall":
        """The compiled call of ``parts`` (matrices on this kind, this one among them) reading the same rows."""
        records = [p.single for p in parts if p.single is not None]
        single = None
        if len(records) == len(parts) and all(fns == records[0][0] for fns, _ in records):
            single = records[0][0], self.NRs, np.array([weights for _, weights in records])
        tiled = self.fns, self.NRs, np.array([p.weights for p in parts])
        return tile_calls.TileCall(self.prep, self.G, tiled, single, [p.n for p in parts], self.counts)

    def chosen(self, m: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(tile functions, weight addresses) for a call of ``m`` rows: the records' where they pay
        (``tile_calls.RECORD_ROWS``), else the float32 scales'. Either gives every element the same bits."""
        return self.single if self.single is not None and m <= tile_calls.RECORD_ROWS else (self.fns, self.weights)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        if X.dtype != np.float32 or not X.flags.c_contiguous:
            X = np.ascontiguousarray(X, dtype=np.float32)
        m = X.shape[0]
        return self.call(self.keys.get(m) or ("tiles", self.kind, (self.n, self.k), bucket(m)), X)


def matmul(kind: str, w: Any, X: np.ndarray) -> np.ndarray:
    """``X [m, k] @ Wᵀ`` on the tiles, preparing the matrix on the spot (the layers keep a ``Tiled``)."""
    return Tiled(kind, w)(X)
