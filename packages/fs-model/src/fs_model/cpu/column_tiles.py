"""4-bit codes × int8 activations with 16 *output columns* in a vector's lanes (``q4ic``: AVX-512 VNNI, or AVX2).

Why: the ``q4iw`` tile (integer_tiles.py) puts 16 groups of 4 weights of *one* output in the lanes, so every
``vpdpbusd`` (64 multiply-adds) of every (weight row, input row) pair is followed by that pair's own conversion,
scale product, spread and two FMAs: one instruction in four multiplies, ~100 GFLOP/s a Zen 4 thread at any M.
Here a group of 64 weights of 16 outputs is 16 ``vpdpbusd``, each taking 4 activation bytes broadcast from memory,
and the float work comes once per 16 of them (benchmarks/q4_column_lanes.py: 2.1-3.2× on one thread). AVX2
hosts run a body of their own over the same layout (``_products_avx2``) whose group sums are the same exact
integers, so both give every output the same bits.

Layout (``arrange``): per block of 16 weight rows, per group g of G inputs (64, or GGUF's 32), G/8 pairs of 64
bytes; byte 4l + j of pair p holds row l's input Gg + 8p + j in its low nibble and Gg + 8p + 4 + j in its high one.
Scales and biases per block, group and row: ``[n/16, k/G, 16]``, kept as an ``[n, k/G]`` array (row stride k/G
values, so the tiles' ``ps + i·sg`` for a block's first row i is the block's start). Same bytes as the planar
layout.

The contract, per output element (every tile: 16 × 4, 16 × 2, 16 × 1 - a row's bits never depend on M):

    acc = 0;  for g in order:  I = Σ_j codes·xq  (exact int32);  acc = fma(float(I), s_g · sx_g, acc)
                                                                  acc = fma(b_g, Σx_g, acc)

with xq, sx, Σx the int8 activations, scale and sum of each group (integer_tiles.quantize_rows).
"""

from typing import Any

import numpy as np

from . import HAVE_NUMBA
from .float_tiles import PREFETCH

KIND = "q4ic"
COLUMNS = 16  # outputs a tile covers: one work item (tile_loops.BLOCK) is one tile
GROUPS = (32, 64)  # inputs a group: MLX's default and GGUF's Q4_0 / Q4_1
V = "<16 x float>"
LAYOUTS = (None, "bf16", "f16")  # scales and biases: float32, bf16 bits or float16 (read as stored)


def applies(n: int, k: int, group: int) -> bool:
    """The shape this kind covers: whole 16-row blocks, groups of 32 or 64."""
    return n % COLUMNS == 0 and group in GROUPS and k % group == 0


def arrange(codes: np.ndarray, scales: np.ndarray, biases: np.ndarray, G: int) -> tuple[np.ndarray, ...]:
    """Planar 4-bit codes [n, k/2] (affine.py) and per-group scales / biases [n, k/G] -> the layout above. The codes
    in one compiled pass a block of 16 rows at a time: no full-size temporaries (a whole MLX 4-bit Qwen3-30B-A3B
    arranged with numpy's reshapes loaded in 150 s at 1.11x its bytes of peak RSS; docs/performance.md)."""
    if not HAVE_NUMBA:  # pragma: no cover - the tiles need numba: q4ic is never chosen without it
        raise RuntimeError("q4ic's layout is made by a compiled kernel: install numba (fs-model[fast])")
    n, half = codes.shape
    out = np.empty((n, half), np.uint8)
    _arrange_codes(np.ascontiguousarray(codes), G, out)

    def columns(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a.reshape(n // COLUMNS, COLUMNS, -1).transpose(0, 2, 1)).reshape(n, -1)

    return out, columns(scales), columns(biases)


if HAVE_NUMBA:
    from numba import njit

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


def planar(codes: np.ndarray, scales: np.ndarray, biases: np.ndarray, G: int) -> tuple[np.ndarray, ...]:
    """Inverse of ``arrange`` (the dequantizing oracle, an embedding's rows)."""
    from .affine import _planar

    n, half = codes.shape
    pairs = codes.reshape(n // COLUMNS, 2 * half // 8, COLUMNS, 4).transpose(0, 2, 1, 3)  # [block, lane, pair, j]
    e = np.stack([pairs & 15, pairs >> 4], axis=3).reshape(n, 2 * half)

    def rows(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a.reshape(n // COLUMNS, -1, COLUMNS).transpose(0, 2, 1)).reshape(n, -1)

    return _planar(e, G), rows(scales), rows(biases)


def _load(name: str, address: str, ty: str, offset: int | str = 0) -> list[str]:
    at = f"{name}.a"
    return [
        f"  {at} = add i64 {address}, {offset}",
        f"  {name}.p = inttoptr i64 {at} to ptr",
        f"  {name} = load {ty}, ptr {name}.p, align 1",
    ]


def _splat(name: str, scalar: str, ty: str, elt: str, W: int = 16) -> list[str]:
    return [
        f"  {name}.0 = insertelement {ty} poison, {elt} {scalar}, i32 0",
        f"  {name} = shufflevector {ty} {name}.0, {ty} poison, <{W} x i32> zeroinitializer",
    ]


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


def _products_vnni(MR: int, G: int) -> tuple[list[str], list[list[str]]]:
    """A group's exact int32 sums, one ``vpdpbusd`` a chunk of 4 inputs: (IR, the sums' names per row, per half)."""
    L: list[str] = []
    for p in range(G // 8):  # chunk pairs: the low nibbles are chunk 2p, the high ones chunk 2p + 1
        L += _load(f"%cq{p}", "%wg", "<64 x i8>", 64 * p)
        L += [
            f"  %lo{p}.b = and <64 x i8> %cq{p}, splat (i8 15)",
            f"  %hi{p}.b = lshr <64 x i8> %cq{p}, splat (i8 4)",
            f"  %lo{p} = bitcast <64 x i8> %lo{p}.b to <16 x i32>",
            f"  %hi{p} = bitcast <64 x i8> %hi{p}.b to <16 x i32>",
        ]
        for h, plane in enumerate(("lo", "hi")):
            c = 2 * p + h
            for r in range(MR):
                prev = "zeroinitializer" if c == 0 else f"%I{r}_{c}"
                L += _load(f"%xw{r}_{c}", f"%xg{r}", "i32", 4 * c)
                L += _splat(f"%xs{r}_{c}", f"%xw{r}_{c}", "<16 x i32>", "i32", 16)
                L.append(
                    f"  %I{r}_{c + 1} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> {prev}, "
                    f"<16 x i32> %{plane}{p}, <16 x i32> %xs{r}_{c})"
                )
    return L, [[f"%I{r}_{G // 4}"] for r in range(MR)]


def _products_avx2(MR: int, G: int) -> tuple[list[str], list[list[str]]]:
    """The same sums on AVX2, each 8 rows' half of a chunk pair in a 32-byte register: ``vpmaddubsw`` (codes ≤ 15
    times int8: pairs within ±3840) added as int16 over 8 chunks (within ±30720: exact), then ``vpmaddwd`` by ones
    into int32. Exact integers either way, so both bodies give every output the same bits."""
    L: list[str] = []
    ones = "splat (i16 1)"
    acc: dict[tuple[int, int], str] = {}  # (row, half) -> int32 sum so far
    part: dict[tuple[int, int], str] = {}  # (row, half) -> int16 sum of this run of 8 chunks
    for p in range(G // 8):
        for half in range(2):
            t = f"{p}_{half}"
            L += _load(f"%cq{t}", "%wg", "<32 x i8>", 64 * p + 32 * half)
            L += [f"  %lo{t} = and <32 x i8> %cq{t}, splat (i8 15)", f"  %hi{t} = lshr <32 x i8> %cq{t}, splat (i8 4)"]
        for h, plane in enumerate(("lo", "hi")):
            c = 2 * p + h
            for r in range(MR):
                L += _load(f"%xw{r}_{c}", f"%xg{r}", "i32", 4 * c)
                L += _splat(f"%xs{r}_{c}.i", f"%xw{r}_{c}", "<8 x i32>", "i32", 8)
                L.append(f"  %xs{r}_{c} = bitcast <8 x i32> %xs{r}_{c}.i to <32 x i8>")
                for half in range(2):
                    u = f"{r}_{c}_{half}"
                    L.append(
                        f"  %m{u} = call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> %{plane}{p}_{half}, "
                        f"<32 x i8> %xs{r}_{c})"
                    )
                    if c % 8:
                        L.append(f"  %s{u} = add <16 x i16> {part[r, half]}, %m{u}")
                        part[r, half] = f"%s{u}"
                    else:
                        part[r, half] = f"%m{u}"
                    if c % 8 == 7:  # a run of 8 chunks: widen into the int32 sums
                        wd = "@llvm.x86.avx2.pmadd.wd"
                        L.append(f"  %w{u} = call <8 x i32> {wd}(<16 x i16> {part[r, half]}, <16 x i16> {ones})")
                        if (r, half) in acc:
                            L.append(f"  %a{u} = add <8 x i32> {acc[r, half]}, %w{u}")
                            acc[r, half] = f"%a{u}"
                        else:
                            acc[r, half] = f"%w{u}"
    return L, [[acc[r, 0], acc[r, 1]] for r in range(MR)]


def microkernel(MR: int, G: int = 64, layout: str | None = None, W: int = 16) -> str:
    """``@q4ic{G}{_layout}_16x{MR}`` with tiles.py's ABI: pw a block's codes, ps / pb its scales / biases, px MR
    int8 input rows (stride sx), pa their side data ([sx_g for every g, then Σx_g], stride sa), po their 16 outputs
    (stride so); ``groups`` = k / G. W = 16: the AVX-512 VNNI body; 8: the AVX2 one (two halves of 8 outputs)."""
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
        f"  %gw = mul i64 %g, {8 * G}",
        "  %wg = add i64 %pw, %gw",
        f"  %gx = mul i64 %g, {G}",
        "  %g4 = mul i64 %g, 4",
    ]
    # hints into L2 ahead of the codes (``float_tiles.PREFETCH``): the AVX2 body hints every 64-byte line of a group
    # (one line a group: int4 decode 0.88x q4i's, every line 1.09x); the VNNI body one line a group (every line:
    # decode 0.89-0.95x of that; ab_trees.py, 0.6B int4, Zen 4, 2026-12-07)
    for p in range(G // 8 if W == 8 else 1):
        L += [
            f"  %pfa{p} = add i64 %wg, {PREFETCH + 64 * p}",
            f"  %pfp{p} = inttoptr i64 %pfa{p} to ptr",
            f"  call void @llvm.prefetch.p0(ptr %pfp{p}, i32 0, i32 2, i32 1)",
        ]
    for r in range(MR):
        L += [f"  %xo{r} = mul i64 %sx, {r}", f"  %xr{r} = add i64 %px, %xo{r}", f"  %xg{r} = add i64 %xr{r}, %gx"]
    body, sums = _products_vnni(MR, G) if W == 16 else _products_avx2(MR, G)
    L += body
    for h in range(halves):
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

    return f"define void @{name(MR, G, layout)}({ABI}) {{\n" + "\n".join(L) + "\n}\n"


def name(MR: int, G: int = 64, layout: str | None = None) -> str:
    return f"{KIND}{G}{'_' + layout if layout else ''}_{COLUMNS}x{MR}"


def source(MRs: Any, G: int = 64, layout: str | None = None, W: int = 16) -> str:
    """The IR of the tiles for these MRs (integer_tiles.DECLARATIONS declares what they call); W as ``microkernel``."""
    return "".join(microkernel(MR, G, layout, W) for MR in MRs)
