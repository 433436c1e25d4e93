"""Codes × int8 activations with 16 *output columns* in a vector's lanes: ``q4ic`` (4-bit), ``q5ic`` / ``q6ic``
(GGUF's packed 5- and 6-bit codes: packed_columns.py); an AVX-512 VNNI body, or an AVX2 one.

Why: the ``q4iw`` tile (integer_tiles.py) puts 16 groups of 4 weights of *one* output in the lanes, so every
``vpdpbusd`` (64 multiply-adds) of every (weight row, input row) pair is followed by that pair's own conversion,
scale product, spread and two FMAs: one instruction in four multiplies, ~100 GFLOP/s a Zen 4 thread at any M.
Here a group of 64 weights of 16 outputs is 16 ``vpdpbusd``, each taking 4 activation bytes broadcast from memory,
and the float work comes once per 16 of them (benchmarks/q4_column_lanes.py: 2.1-3.2× on one thread). AVX2
hosts run a body of their own over the same layout whose group sums are the same exact integers
(column_dots.py), so both give every output the same bits.

Layout (``arrange``): per block of 16 weight rows, per group g of G inputs (64, or GGUF's 32), G/8 pairs of 64
bytes; byte 4l + j of pair p holds row l's input Gg + 8p + j in its low nibble and Gg + 8p + 4 + j in its high one
(5- and 6-bit codes: these are their low nibbles, their top bits follow each group). Scales and biases per block,
group and row: ``[n/16, k/G, 16]``, kept as an ``[n, k/G]`` array (row stride k/G values, so the tiles'
``ps + i·sg`` for a block's first row i is the block's start); a K-quant's super-block records instead, turned the
same way (column_records.py). Same bytes as the planar layout.

The contract, per output element (every tile: 16 × 4, 16 × 2, 16 × 1 - a row's bits never depend on M):

    acc = 0;  for g in order:  I = Σ_j codes·xq  (exact int32);  acc = fma(float(I), s_g · sx_g, acc)
                                                                  acc = fma(b_g, Σx_g, acc)

with xq, sx, Σx the int8 activations, scale and sum of each group (integer_tiles.quantize_rows).
"""

from typing import Any

import numpy as np

from fs_weights import bf16_to_f32

from . import HAVE_NUMBA, half_scales
from .column_dots import _load, _splat, dots_avx2, dots_vnni
from .float_tiles import PREFETCH

KIND = "q4ic"
KINDS = {"q4ic": 4, "q5ic": 5, "q6ic": 6}  # kind -> code bits (5 and 6: GGUF's packed codes, packed_columns.py)
COLUMNS = 16  # outputs a tile covers: one work item (tile_loops.BLOCK) is one tile
# inputs a group: 4-bit MLX's default and GGUF's Q4_0 / Q4_1 / Q4_K; Q5_0 / Q5_1 / Q5_K; Q6_K
GROUPS = {4: (32, 64), 5: (32,), 6: (16,)}
V = "<16 x float>"
# How far ahead of the codes a tile hints every line into L2, per body (W lanes). A work item here is one 16-row
# block read front to back (12-36 KiB at 0.6B shapes), so the rows' 32 KiB (float_tiles.PREFETCH) overshoots it.
# Measured on whole 0.6B decode steps (Zen 5, 2026-12-07, pinned to 2 threads, ms a step, one hint a group at
# 32 KiB / every line at 4 KiB / at 8 KiB): int4 10.8-12.2 / 10.3-10.5 / 10.6-11.2, Q4_K_M 11.9-12.5 / 9.8-10.2 /
# 9.3-11.5, Q6_K 17.2-17.3 / 12.1-13.8 / 13.4 (q6iw, before the column tiles: 15.0-15.4). The AVX2 body keeps every
# line at 32 KiB (under FS_ISA=avx2 4 KiB came out within noise: 9.1-12.1 against 9.9-11.2).
AHEAD = {16: 4096, 8: PREFETCH}
# A call of a few rows (tile_loops.FETCHING_ROWS: a decode batch) walks each 16-row block once per 4-row panel; the
# first panel streams the block in (its hints AHEAD bytes on stay inside the block), and the later ones, finding it
# in cache, left memory idle while they computed. Their twin (``lead``) hints the same group of the next block - its
# codes, scales and biases - instead, so the next work item streams in meanwhile. Qwen3-0.6B int4's layer matrices
# at 8 rows from memory (28 x 4 grouped calls, two threads, 15 interleaved rounds in one process; Zen 5,
# 2026-12-08): best 9.0-11.7 -> 8.1-9.9 ms, median 10.8-12.2 -> 10.1-10.5 (the codes alone: about half of that
# gain); 16 rows 16.8 -> 15.7; 6 rows (4 + 2) even.
LEAD = True
LAYOUTS = (None, "bf16", "f16", half_scales.SYMMETRIC)  # scales and biases: float32, bf16 bits or float16 (read as
# stored), float16 scales whose biases follow from them (Q4_0, Q5_0); K-quants' super-block records are read too,
# arranged per 16 rows (column_records.py)


def applies(n: int, k: int, group: int, bits: int = 4) -> bool:
    """The shape a kind of these covers: whole 16-row blocks, its groups (packed codes: k % 64 == 0 as stored)."""
    return n % COLUMNS == 0 and group in GROUPS[bits] and k % group == 0 and (bits == 4 or k % 64 == 0)


def arrange(codes: np.ndarray, scales: np.ndarray, biases: np.ndarray, G: int) -> tuple[np.ndarray, ...]:
    """Planar 4-bit codes [n, k/2] (affine.py) and per-group scales / biases [n, k/G] -> the layout above. The codes
    in one compiled pass a block of 16 rows at a time: no full-size temporaries (a whole MLX 4-bit Qwen3-30B-A3B
    arranged with numpy's reshapes loaded in 150 s at 1.11x its bytes of peak RSS; docs/performance.md)."""
    if not HAVE_NUMBA:  # pragma: no cover - the tiles need numba: q4ic is never chosen without it
        raise RuntimeError("q4ic's layout is made by a compiled kernel: install numba (fs-model[fast])")
    n, half = codes.shape
    out = np.empty((n, half), np.uint8)
    _arrange_codes(np.ascontiguousarray(codes), G, out)
    return out, columns(scales), columns(biases)


def columns(a: np.ndarray) -> np.ndarray:
    """Per-row values [n, k/G] (scales, biases) -> ``[n/16, k/G, 16]`` kept as ``[n, k/G]``."""
    n = a.shape[0]
    return np.ascontiguousarray(a.reshape(n // COLUMNS, COLUMNS, -1).transpose(0, 2, 1)).reshape(n, -1)


def rows(a: np.ndarray) -> np.ndarray:
    """Inverse of ``columns``."""
    n = a.shape[0]
    return np.ascontiguousarray(a.reshape(n // COLUMNS, -1, COLUMNS).transpose(0, 2, 1)).reshape(n, -1)


if HAVE_NUMBA:
    from numba import njit

    @njit(cache=True)
    def _lookup(codes, blocks, lanes, scales, biases, G, out):  # pragma: no cover - compiled
        """``lookup``'s rows: input i of lane l lies in pair i // 8 of the lane's block, byte 4l + i % 4, the low
        nibble for i % 8 < 4, else the high one (the module docstring's layout)."""
        half = codes.shape[1]
        flat = codes.reshape(-1)
        for r in range(blocks.shape[0]):
            base, l = blocks[r] * COLUMNS * half, lanes[r]
            for i in range(out.shape[1]):
                byte = flat[base + (i // 8) * 64 + 4 * l + i % 4]
                q = byte & 15 if i % 8 < 4 else byte >> 4
                g = i // G
                out[r, i] = scales[r, g] * np.float32(q) + biases[r, g]

    @njit(cache=True)
    def _arrange_codes(planar, G, out):  # pragma: no cover - compiled
        """``arrange``'s codes: each block's 16 rows unpacked from the planar layout (affine.py: per pair of groups
        byte j holds input j low and G + j high; an odd last group input j low and G/2 + j high) into one code a
        byte, then written as the chunk pairs above."""
        n, half = planar.shape
        k = 2 * half
        paired = k // (2 * G) * 2 * G
        codes = np.empty((COLUMNS, k), np.uint8)
        flat = out.reshape(-1)
        for b in range(n // COLUMNS):
            for lane in range(COLUMNS):
                row = planar[b * COLUMNS + lane]
                for q in range(paired // (2 * G)):
                    for j in range(G):
                        byte = row[q * G + j]
                        codes[lane, 2 * q * G + j] = byte & 15
                        codes[lane, 2 * q * G + G + j] = byte >> 4
                H = G // 2
                for j in range(H if paired < k else 0):
                    byte = row[paired // 2 + j]
                    codes[lane, paired + j] = byte & 15
                    codes[lane, paired + H + j] = byte >> 4
            at = b * COLUMNS * half
            for p in range(k // 8):
                for lane in range(COLUMNS):
                    for j in range(4):
                        flat[at + (p * COLUMNS + lane) * 4 + j] = codes[lane, 8 * p + j] | (
                            codes[lane, 8 * p + 4 + j] << 4
                        )


def lookup(codes: np.ndarray, scales: np.ndarray, biases: np.ndarray, ids: np.ndarray, G: int) -> np.ndarray:
    """Rows ``ids`` of a 4-bit matrix in this layout, dequantized (an embedding lookup): float32 [len(ids), k] with
    the bits of ``dequantize`` (``scale · code + bias`` in float32, two roundings). Only the ids' 16-row blocks are
    touched - turning a block back to rows first cost ~20 numpy calls a token. ``scales`` / ``biases``: [n, k/G]
    as this layout keeps them, any of its float dtypes (bf16 bits too: half_scales.py)."""
    n, k = codes.shape[0], 2 * codes.shape[1]
    blocks, lanes = ids // COLUMNS, ids % COLUMNS
    parts = []
    for a in (scales, biases):  # each id's own [k/G] scales: its lane of its block's [k/G, 16]
        mine = a.reshape(n // COLUMNS, k // G, COLUMNS)[blocks, :, lanes]
        parts.append(bf16_to_f32(mine) if mine.dtype == np.uint16 else mine.astype(np.float32))  # exact
    out = np.empty((ids.size, k), np.float32)
    _lookup(codes, blocks, lanes, parts[0], parts[1], G, out)
    return out


def planar(codes: np.ndarray, scales: np.ndarray, biases: np.ndarray, G: int) -> tuple[np.ndarray, ...]:
    """Inverse of ``arrange`` (the dequantizing oracle, an embedding's rows)."""
    from .affine import _planar

    n, half = codes.shape
    pairs = codes.reshape(n // COLUMNS, 2 * half // 8, COLUMNS, 4).transpose(0, 2, 1, 3)  # [block, lane, pair, j]
    e = np.stack([pairs & 15, pairs >> 4], axis=3).reshape(n, 2 * half)

    return _planar(e, G), rows(scales), rows(biases)


def _scales(name: str, base: str, g: str, layout: str | None, W: int, h: int) -> list[str]:
    """Rows 16·.. of half ``h`` (W of them) of a block's ``[k/G, 16]`` scales (or biases) at ``base``, group ``g``,
    as float32."""
    size = 2 if layout else 4
    V = f"<{W} x float>"
    L = [f"  {name}.g = mul i64 {g}, {16 * size}", f"  {name}.o = add i64 {name}.g, {W * size * h}"]
    if layout is None:
        return L + _load(name, base, V, f"{name}.o")
    if layout == "f16":
        return (
            L
            + _load(f"{name}.h", base, f"<{W} x half>", f"{name}.o")
            + [f"  {name} = fpext <{W} x half> {name}.h to {V}"]
        )
    return (
        L
        + _load(f"{name}.h", base, f"<{W} x i16>", f"{name}.o")
        + [
            f"  {name}.w = zext <{W} x i16> {name}.h to <{W} x i32>",
            f"  {name}.s = shl <{W} x i32> {name}.w, splat (i32 16)",
            f"  {name} = bitcast <{W} x i32> {name}.s to {V}",
        ]
    )


def _chunks4(G: int, W: int) -> tuple[list[str], list[list[str]]]:
    """A group's G/4 chunks of 4-bit codes (4 inputs × 16 rows) from its G/8 pairs at %wg: per chunk, its name(s) -
    W = 16: one <16 x i32>; W = 8: two <32 x i8>, rows 0-7 and 8-15 (packed_columns.chunks: 5- and 6-bit codes)."""
    L: list[str] = []
    names: list[list[str]] = []
    for p in range(G // 8):  # chunk pairs: the low nibbles are chunk 2p, the high ones chunk 2p + 1
        if W == 16:
            L += _load(f"%cq{p}", "%wg", "<64 x i8>", 64 * p)
            L += [
                f"  %lo{p}.b = and <64 x i8> %cq{p}, splat (i8 15)",
                f"  %hi{p}.b = lshr <64 x i8> %cq{p}, splat (i8 4)",
                f"  %lo{p} = bitcast <64 x i8> %lo{p}.b to <16 x i32>",
                f"  %hi{p} = bitcast <64 x i8> %hi{p}.b to <16 x i32>",
            ]
            names += [[f"%lo{p}"], [f"%hi{p}"]]
            continue
        for half in range(2):
            t = f"{p}_{half}"
            L += _load(f"%cq{t}", "%wg", "<32 x i8>", 64 * p + 32 * half)
            L += [f"  %lo{t} = and <32 x i8> %cq{t}, splat (i8 15)", f"  %hi{t} = lshr <32 x i8> %cq{t}, splat (i8 4)"]
        names += [[f"%lo{p}_0", f"%lo{p}_1"], [f"%hi{p}_0", f"%hi{p}_1"]]
    return L, names


def microkernel(MR: int, G: int = 64, layout: str | None = None, W: int = 16, bits: int = 4, lead: bool = False) -> str:
    """``@q{bits}ic{G}{_layout}_16x{MR}`` with tiles.py's ABI: pw a block's codes, ps / pb its scales / biases (or
    ps its arranged super-block records: column_records.py), px MR int8 input rows (stride sx), pa their side data
    ([sx_g for every g, then Σx_g], stride sa), po their 16 outputs (stride so); ``groups`` = k / G. W = 16: the
    AVX-512 VNNI body; 8: the AVX2 one (two halves of 8 outputs). ``bits`` 5 and 6: packed_columns.py's layout."""
    halves = 16 // W
    V = f"<{W} x float>"
    L = ["entry:", "  %sums = mul i64 %groups, 4", "  br label %loop"]
    L += ["loop:", "  %g = phi i64 [0, %entry], [%gn, %loop]"]
    L += [
        f"  %acc{r}_{h} = phi {V} [zeroinitializer, %entry], [%out{r}_{h}, %loop]"
        for r in range(MR)
        for h in range(halves)
    ]
    L += [
        f"  %gw = mul i64 %g, {2 * G * bits}",
        "  %wg = add i64 %pw, %gw",
        f"  %gx = mul i64 %g, {G}",
        "  %g4 = mul i64 %g, 4",
    ]
    # hints into L2 for every 64-byte line of a group, AHEAD[W] bytes ahead of the codes (``float_tiles.PREFETCH``);
    # ``lead``: the same group of the next 16-row block (a few-row call's panels after its first: LEAD says why)
    if lead:
        L += [f"  %blk = mul i64 %groups, {2 * G * bits}", "  %wl = add i64 %wg, %blk"]
    for p in range(G * bits // 32):
        L += [
            f"  %pfa{p} = add i64 {'%wl' if lead else '%wg'}, {64 * p if lead else AHEAD[W] + 64 * p}",
            f"  %pfp{p} = inttoptr i64 %pfa{p} to ptr",
            f"  call void @llvm.prefetch.p0(ptr %pfp{p}, i32 0, i32 2, i32 1)",
        ]
    from . import column_records, packed_columns

    if lead and layout not in column_records.LAYOUTS:  # the next block's scales and biases of this group too
        size = 4 if layout is None else 2
        sides = ("ps",) if layout == half_scales.SYMMETRIC else ("ps", "pb")
        L += [f"  %sg.o = mul i64 %g, {16 * size}", f"  %sb.o = mul i64 %groups, {16 * size}",
              "  %sl.o = add i64 %sg.o, %sb.o"]  # fmt: skip
        for side in sides:
            L += [f"  %{side}l.a = add i64 %{side}, %sl.o", f"  %{side}l.p = inttoptr i64 %{side}l.a to ptr",
                  f"  call void @llvm.prefetch.p0(ptr %{side}l.p, i32 0, i32 2, i32 1)"]  # fmt: skip
    for r in range(MR):
        L += [f"  %xo{r} = mul i64 %sx, {r}", f"  %xr{r} = add i64 %px, %xo{r}", f"  %xg{r} = add i64 %xr{r}, %gx"]

    code, chunks = _chunks4(G, W) if bits == 4 else packed_columns.chunks(G, bits, W)
    body, sums = dots_vnni(MR, chunks) if W == 16 else dots_avx2(MR, chunks, bits)
    L += code + body
    for h in range(halves):
        if layout in column_records.LAYOUTS:  # a K-quant's records, arranged per 16 rows: ps is their address
            L += column_records.scales_and_biases(f"%sv{h}", f"%bv{h}", "%ps", "%g", W, h, layout)
        elif layout == half_scales.SYMMETRIC:  # Q4_0 / Q5_0: each bias is its scale times -2^(bits-1), exactly
            L += _scales(f"%sv{h}", "%ps", "%g", "f16", W, h)
            L += [f"  %bv{h} = fmul {V} %sv{h}, splat (float {-(1 << (bits - 1))}.0)"]
        else:
            L += _scales(f"%sv{h}", "%ps", "%g", layout, W, h) + _scales(f"%bv{h}", "%pb", "%g", layout, W, h)
    for r in range(MR):
        L += [f"  %ao{r} = mul i64 %sa, {r}", f"  %ar{r} = add i64 %pa, %ao{r}", f"  %as{r} = add i64 %ar{r}, %sums"]
        L += _load(f"%sx{r}", f"%ar{r}", "float", "%g4") + _load(f"%sm{r}", f"%as{r}", "float", "%g4")
        L += _splat(f"%sxv{r}", f"%sx{r}", V, "float", W) + _splat(f"%smv{r}", f"%sm{r}", V, "float", W)
        for h in range(halves):
            t = f"{r}_{h}"
            L += [
                f"  %f{t} = sitofp <{W} x i32> {sums[r][h]} to {V}",
                f"  %k{t} = fmul {V} %sv{h}, %sxv{r}",
                f"  %m{t} = call {V} @llvm.fma.v{W}f32({V} %f{t}, {V} %k{t}, {V} %acc{t})",
                f"  %out{t} = call {V} @llvm.fma.v{W}f32({V} %bv{h}, {V} %smv{r}, {V} %m{t})",
            ]
    L += ["  %gn = add i64 %g, 1", "  %gd = icmp sge i64 %gn, %groups"]
    L += ["  br i1 %gd, label %exit, label %loop", "exit:"]
    for r in range(MR):
        L += [f"  %oo{r} = mul i64 %so, {r}", f"  %oa{r} = add i64 %po, %oo{r}"]
        for h in range(halves):
            L += [
                f"  %ob{r}_{h} = add i64 %oa{r}, {4 * W * h}",
                f"  %op{r}_{h} = inttoptr i64 %ob{r}_{h} to ptr",
                f"  store {V} %out{r}_{h}, ptr %op{r}_{h}, align 4",
            ]
    L.append("  ret void")
    from .tiles import ABI

    return f"define void @{name(MR, G, layout, bits, lead)}({ABI}) {{\n" + "\n".join(L) + "\n}\n"


def name(MR: int, G: int = 64, layout: str | None = None, bits: int = 4, lead: bool = False) -> str:
    return f"q{bits}ic{G}{'_' + layout if layout else ''}_{COLUMNS}x{MR}{'n' if lead else ''}"


def source(MRs: Any, G: int = 64, layout: str | None = None, W: int = 16, bits: int = 4) -> str:
    """The IR of the tiles for these MRs (integer_tiles.DECLARATIONS declares what they call); W, bits as
    ``microkernel``."""
    return "".join(microkernel(MR, G, layout, W, bits) for MR in MRs)
