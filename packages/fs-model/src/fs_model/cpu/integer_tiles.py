"""4- and 8-bit register tiles with int8 activations and integer dot products (AVX2), in LLVM IR.

Why: the float 4-bit tile spends about five instructions per weight converting codes (mask, widen, convert,
fma with scale and bias) before the multiply, so 4-bit decode is bound by arithmetic, not by its 0.6 bytes per
weight. ``vpmaddubsw`` multiplies 32 unsigned bytes (the codes, 0..15) by 32 signed bytes (the activations
quantized to int8) and adds neighbours into 16-bit lanes; ``vpmaddwd`` by ones widens pairs into 32-bit lanes:
two instructions per 32 weights, exact. This is what llama.cpp does for Q4_0 on AVX2. 8-bit codes (0..255) would
overflow ``vpmaddubsw``'s 16-bit sums, so they are widened to 16 bits and multiplied by ``vpmaddwd`` directly (16
per instruction; products up to 255 × 127 add exactly in 32 bits); 1.5× faster than the float 8-bit tile on one
matrix but within noise on a whole decode step here (memory-bound), so 8-bit weights keep float activations
unless ``FS_INT8_ACTIVATIONS=all`` (the activation rounding would triple their error).

Contract (the same as vnni.py's, so one exact reference tests both): a row's activations are quantized per group
of G (the weights' group: 64, or 32 for 4-bit codes - GGUF's Q4_K, Q4_1, Q4_0), ``x ≈ sx_g · xq_g`` with
``sx_g = max|x_g| / 127``, and with weights ``w = s·q + b``

    out[r, i] = hsum(acc) + bsum
    acc  = fma(float(q_g · xq_g as 8 int32 lanes), s_g · sx_g, acc)   over groups g = 0, 1, 2, … (8-wide)
    bsum = fma(b_g, x̂s_g, bsum)                                       over the same groups (scalar)

where ``x̂s_g = sx_g · Σ xq_g``, the sum of the *rounded* activations (as llama.cpp's bsums): the whole product is then
the exact dot product of the weights with the rounded activations, whose error ``Σ w·(x̂ - x)`` has the weights' own
size. Summing the exact ``x`` for the bias term instead (until 2026-12-06) leaves ``Σ s·q·(x̂ - x)``: codes run 0..15 or
0..63, not around 0, so that error is up to twice as large (a random Qwen3's Q6_K file moved up to 0.12 nats against its
float32 logits, 0.03 now; Q4_K_M 0.053 → 0.044). Integer sums are exact and each row's activations are quantized on
their own, so the result of a row depends on that row alone: batch invariant like every tile (tiles.py). No 16-bit
overflow for 4-bit codes: a lane adds 4 products of at most 15 × 127.
"""

from collections.abc import Callable

import numpy as np

from . import HAVE_NUMBA, half_scales
from .float_tiles import prefetch, stores
from .superblock_scales import scale_and_bias

GROUP = 64  # weights per group, = activation quantization group (two 32-byte chunks per group)
GROUPS_4BIT = (32, 64)  # the 4-bit AVX2 tile also takes groups of 32 (one 32-byte chunk per pair of groups)

if HAVE_NUMBA:
    from numba import njit, prange

    from .threads import PARALLEL_FLOATS, both

    def _quantize_impl(X, G, XQ, SX, XS):  # pragma: no cover - compiled
        for r in prange(X.shape[0]):
            for g in range(SX.shape[1]):
                x = X[r, g * G : (g + 1) * G]
                m = np.float32(0.0)
                for j in range(G):
                    m = max(m, abs(x[j]))
                scale = m / np.float32(127.0) if m > 0 else np.float32(1.0)
                inv = np.float32(1.0) / scale
                q = XQ[r, g * G : (g + 1) * G]
                t = np.int64(0)
                for j in range(G):
                    v = np.int8(np.rint(x[j] * inv))
                    q[j] = v
                    t += np.int64(v)
                SX[r, g], XS[r, g] = scale, scale * np.float32(t)

    _quantize_serial, _quantize_parallel = both(_quantize_impl, fastmath=True)

    @njit(cache=True)
    def _quantize_rows(X, G, XQ, SX, XS):  # pragma: no cover - compiled
        """Per group of G: SX = max|x|/127, XQ = round(x/SX) in int8, XS = SX·ΣXQ (the bias term's sum of the
        rounded activations: the integer sum is exact, one rounding in the product); over the pool from
        PARALLEL_FLOATS floats."""
        if X.size >= PARALLEL_FLOATS:
            _quantize_parallel(X, G, XQ, SX, XS)
        else:
            _quantize_serial(X, G, XQ, SX, XS)


def quantize_rows(x: np.ndarray, G: int = GROUP) -> tuple[np.ndarray, np.ndarray]:
    """x [m, k] float32 -> (xq int8 [m, k], side float32 [m, 2·k/G]: each row's sx_g for every group, then its
    x̂s_g = sx_g·Σxq_g for every group) per the module's contract."""
    m, k = x.shape
    ng = k // G
    xq, side = np.empty((m, k), np.int8), np.empty((m, 2 * ng), np.float32)
    _quantize_rows(x, G, xq, side[:, :ng], side[:, ng:])
    return xq, side


def scales_and_sums(side: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``quantize_rows``' side array split into sx [m, k/G] and x̂s [m, k/G] (views)."""
    ng = side.shape[1] // 2
    return side[:, :ng], side[:, ng:]


def _load(name: str, base: str, offset: int | str, ty: str) -> list[str]:
    return [
        f"  {name}.a = add i64 {base}, {offset}",
        f"  {name}.p = inttoptr i64 {name}.a to ptr",
        f"  {name} = load {ty}, ptr {name}.p, align 1",
    ]


def _entry(NR: int, MR: int, sums_offset: str) -> list[str]:
    L = ["entry:"]
    for n in range(NR):
        L += [f"  %wr{n}.m = mul i64 %sw, {n}", f"  %wr{n} = add i64 %pw, %wr{n}.m"]
        L += [
            f"  %sr{n}.m = mul i64 %sg, {n}",
            f"  %sr{n} = add i64 %ps, %sr{n}.m",
            f"  %br{n} = add i64 %pb, %sr{n}.m",
        ]
    for r in range(MR):
        L += [f"  %xr{r}.m = mul i64 %sx, {r}", f"  %xr{r} = add i64 %px, %xr{r}.m"]
        L += [f"  %ar{r}.m = mul i64 %sa, {r}", f"  %ar{r} = add i64 %pa, %ar{r}.m"]
    return [*L, f"  %ng4 = {sums_offset}", "  br label %loop"]


def _combine(n: int, r: int, h: int, ints: str, prev_acc: str, prev_b: str, W: int = 8) -> list[str]:
    """acc ← fma(float(ints), s·sx, acc); bsum ← fma(b, Σx, bsum) for weight row n, input row r, group slot h."""
    t = f"{n}_{r}_{h}"
    v = f"<{W} x float>"
    return [
        f"  %f{t} = sitofp <{W} x i32> {ints} to {v}",
        f"  %k{t} = fmul float %s{n}_{h}, %sx{r}_{h}",
        f"  %k{t}.0 = insertelement {v} poison, float %k{t}, i32 0",
        f"  %k{t}.v = shufflevector {v} %k{t}.0, {v} poison, <{W} x i32> zeroinitializer",
        f"  %acc{t} = call {v} @llvm.fma.v{W}f32({v} %f{t}, {v} %k{t}.v, {v} {prev_acc})",
        f"  %bs{t} = call float @llvm.fma.f32(float %b{n}_{h}, float %xs{r}_{h}, float {prev_b})",
    ]


def _group_scalars(NR: int, MR: int, offsets: tuple[str, ...], layout: str | None = None) -> list[str]:
    """Scales and biases of each weight row (read as float32 or 16-bit floats - half_scales.py -, or made from its
    super-block records: superblock_scales.py), activation scales and sums of each input row, per group slot
    (``offsets``: the slots' byte offsets as float32 ones)."""
    L: list[str] = []
    for h, gb in enumerate(offsets):
        for n in range(NR):
            if layout is not None:
                L += [f"  %gi{n}_{h} = udiv i64 {gb}, 4"]
                if layout in half_scales.LAYOUTS:
                    srow, brow, g = f"%sr{n}", f"%br{n}", f"%gi{n}_{h}"
                    L += half_scales.scale_and_bias(f"%s{n}_{h}", f"%b{n}_{h}", srow, brow, g, layout)
                else:
                    L += scale_and_bias(f"%s{n}_{h}", f"%b{n}_{h}", f"%sr{n}", f"%gi{n}_{h}", layout)
                continue
            L += _load(f"%s{n}_{h}", f"%sr{n}", gb, "float") + _load(f"%b{n}_{h}", f"%br{n}", gb, "float")
        for r in range(MR):
            L += _load(f"%sx{r}_{h}", f"%ar{r}", gb, "float") + _load(f"%xs{r}_{h}", f"%as{r}", gb, "float")
    return L


def _pair_addresses(NR: int, MR: int, G: int = GROUP) -> list[str]:
    """Where loop step %c's pair of groups lies: each weight row's G planar code bytes (%wc, prefetched ahead),
    each input row's 2G activation bytes (%xb) and side data (%as), and the two groups' float offsets (%g0b, %g1b)."""
    L = [f"  %cb = mul i64 %c, {G}", "  %g0 = mul i64 %c, 2", "  %g0b = mul i64 %g0, 4", "  %g1b = add i64 %g0b, 4"]
    for n in range(NR):
        L += [f"  %wc{n} = add i64 %wr{n}, %cb", *prefetch(f"%pf{n}", f"%wc{n}")]
    for r in range(MR):
        L += [
            f"  %xc{r} = mul i64 %c, {2 * G}",
            f"  %xb{r} = add i64 %xr{r}, %xc{r}",
            f"  %as{r} = add i64 %ar{r}, %ng4",
        ]
    return L


def _pair_of_groups(
    NR: int, MR: int, products: Callable[[int, int, int, str, str], list[str]], W: int, layout: str | None = None
) -> list[str]:
    """The group scalars, then per weight row n and input row r the low-plane group's then the high-plane group's
    integer products (``products`` defines %i{n}_{r}_{h}: W int32 lanes) folded into the accumulators."""
    L = _group_scalars(NR, MR, ("%g0b", "%g1b"), layout)
    for n in range(NR):
        for r in range(MR):
            prev_acc, prev_b = f"%acc{n}_{r}", f"%bs{n}_{r}"
            for h, plane in enumerate(("lo", "hi")):
                t = f"{n}_{r}_{h}"
                L += [*products(n, r, h, plane, t), *_combine(n, r, h, f"%i{t}", prev_acc, prev_b, W)]
                prev_acc, prev_b = f"%acc{t}", f"%bs{t}"
    return L


def _q4_body(NR: int, MR: int, G: int = GROUP, layout: str | None = None) -> tuple[list[str], int]:
    """One pair of groups: G planar code bytes per weight row (G/32 chunks of 32 bytes, each a low and a high nibble
    plane), 2G activation bytes per input row; ``vpmaddubsw`` then ``vpmaddwd`` by ones."""
    C = G // 32  # 32-byte chunks per group
    L = _pair_addresses(NR, MR, G)
    for n in range(NR):
        for j in range(C):
            L += _load(f"%cq{n}_{j}", f"%wc{n}", 32 * j, "<32 x i8>")
            L += [
                f"  %lo{n}_{j} = and <32 x i8> %cq{n}_{j}, splat (i8 15)",
                f"  %hi{n}_{j} = lshr <32 x i8> %cq{n}_{j}, splat (i8 4)",
            ]
    for r in range(MR):
        for j in range(2 * C):
            L += _load(f"%x{r}_{j}", f"%xb{r}", 32 * j, "<32 x i8>")

    def products(n: int, r: int, h: int, plane: str, t: str) -> list[str]:
        P = [
            f"  %p{t}{j} = call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> %{plane}{n}_{j}, "
            f"<32 x i8> %x{r}_{C * h + j})"
            for j in range(C)
        ]
        total = f"%p{t}0"
        if C == 2:  # two chunks' 16-bit sums add without overflow (8 products of at most 15 × 127 per lane)
            P.append(f"  %p{t} = add <16 x i16> %p{t}0, %p{t}1")
            total = f"%p{t}"
        return [
            *P,
            f"  %i{t} = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> {total}, <16 x i16> splat (i16 1))",
        ]

    return L + _pair_of_groups(NR, MR, products, 8, layout), 1


def _q4_vnni_body(NR: int, MR: int, layout: str | None = None) -> tuple[list[str], int]:
    """The same pair of groups on AVX-512 VNNI: each row's 64 code bytes in one register (low nibbles: the first
    group, high: the second), each group's 64 activations in one, one ``vpdpbusd`` per group: 16 int32 lanes of
    exact sums of 4 products (the 16-wide form of the contract: 16 lanes, then tiles.py's 16-lane hsum)."""
    L = _pair_addresses(NR, MR)
    for n in range(NR):
        L += _load(f"%cq{n}", f"%wc{n}", 0, "<64 x i8>")
        L += [
            f"  %lo{n}.b = and <64 x i8> %cq{n}, splat (i8 15)",
            f"  %hi{n}.b = lshr <64 x i8> %cq{n}, splat (i8 4)",
            f"  %lo{n} = bitcast <64 x i8> %lo{n}.b to <16 x i32>",
            f"  %hi{n} = bitcast <64 x i8> %hi{n}.b to <16 x i32>",
        ]
    for r in range(MR):
        for h in range(2):
            L += _load(f"%x{r}_{h}", f"%xb{r}", 64 * h, "<16 x i32>")

    def products(n: int, r: int, h: int, plane: str, t: str) -> list[str]:
        return [
            f"  %i{t} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> zeroinitializer, "
            f"<16 x i32> %{plane}{n}, <16 x i32> %x{r}_{h})"
        ]

    L += _pair_of_groups(NR, MR, products, 16, layout)
    return L, 1


def _q8_body(NR: int, MR: int, layout: str | None = None) -> tuple[list[str], int]:
    """One group: 64 code bytes per weight row widened to 16 bits (0..255), 64 activations sign-extended,
    ``vpmaddwd`` (products up to 255 × 127 add exactly in 32 bits)."""
    L = ["  %cb = mul i64 %c, 64", "  %g0b = mul i64 %c, 4"]
    for n in range(NR):
        L += [f"  %wc{n} = add i64 %wr{n}, %cb", *prefetch(f"%pf{n}", f"%wc{n}")]
        for j in range(4):
            L += _load(f"%cq{n}_{j}", f"%wc{n}", 16 * j, "<16 x i8>")
            L.append(f"  %cw{n}_{j} = zext <16 x i8> %cq{n}_{j} to <16 x i16>")
    for r in range(MR):
        L += [f"  %xb{r} = add i64 %xr{r}, %cb", f"  %as{r} = add i64 %ar{r}, %ng4"]
        for j in range(4):
            L += _load(f"%x{r}_{j}", f"%xb{r}", 16 * j, "<16 x i8>")
            L.append(f"  %xw{r}_{j} = sext <16 x i8> %x{r}_{j} to <16 x i16>")
    L += _group_scalars(NR, MR, ("%g0b",), layout)
    for n in range(NR):
        for r in range(MR):
            t = f"{n}_{r}_0"
            for j in range(4):
                L.append(
                    f"  %m{t}{j} = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %cw{n}_{j}, <16 x i16> %xw{r}_{j})"
                )
            L += [f"  %a{t} = add <8 x i32> %m{t}0, %m{t}1", f"  %b{t}x = add <8 x i32> %m{t}2, %m{t}3"]
            L += [f"  %i{t} = add <8 x i32> %a{t}, %b{t}x", *_combine(n, r, 0, f"%i{t}", f"%acc{n}_{r}", f"%bs{n}_{r}")]
    return L, 0


def microkernel(NR: int, MR: int, bits: int = 4, vnni: bool = False, G: int = GROUP, layout: str | None = None) -> str:
    """``@q{bits}i_{NR}x{MR}`` (``@q4iw_…`` with ``vnni``; ``@q4i_k4_…`` reading super-block records, ``…_bf16_…``
    / ``…_f16_…`` 16-bit scales and biases) with tiles.py's ABI: pw/sw codes (4-bit: planar), ps/pb/sg scales and
    biases (or ps/sg the records), px/sx int8 activations, pa/sa per-row [sx_g for every g, then Σx_g for every g]
    (float32); ``groups`` counts loop iterations: pairs of groups (4-bit) or groups (8-bit). ``G``: 32 or 64 for the
    AVX2 4-bit tile, 64 for the others."""
    if G != GROUP and (bits != 4 or vnni):
        raise ValueError(f"the {bits}-bit{' VNNI' if vnni else ''} integer tile takes groups of {GROUP}, not {G}")
    if layout not in (None, *half_scales.LAYOUTS) and (bits != 4 or vnni):
        raise ValueError("super-block records are read by the integer tiles on 4-bit groups of 32 only (AVX2's here, "
                         "VNNI's in vnni_superblock.py)")  # fmt: skip
    pairs = [(n, r) for n in range(NR) for r in range(MR)]
    W = 16 if vnni else 8
    body, last = (
        _q4_vnni_body(NR, MR, layout)
        if vnni
        else _q4_body(NR, MR, G, layout)
        if bits == 4
        else _q8_body(NR, MR, layout)
    )
    sums = "mul i64 %groups, 8" if bits == 4 else "mul i64 %groups, 4"  # byte offset of the Σx_g in a side row
    L = [*_entry(NR, MR, sums), "loop:", "  %c = phi i64 [0, %entry], [%cn, %loop]"]
    for n, r in pairs:
        L.append(f"  %acc{n}_{r} = phi <{W} x float> [zeroinitializer, %entry], [%acc{n}_{r}_{last}, %loop]")
        L.append(f"  %bs{n}_{r} = phi float [0.0, %entry], [%bs{n}_{r}_{last}, %loop]")
    L += body
    L += ["  %cn = add i64 %c, 1", "  %cd = icmp sge i64 %cn, %groups", "  br i1 %cd, label %exit, label %loop"]
    accs = {(n, r): f"%acc{n}_{r}_{last}" for n, r in pairs}
    L += ["exit:", *stores(accs, {(n, r): f"%bs{n}_{r}_{last}" for n, r in pairs}, NR, MR, W)]
    L.append("  ret void")
    from .tiles import ABI

    name = f"q{bits}i{'w' if vnni else ''}{'_' + layout if layout else ''}_{NR}x{MR}"
    return f"define void @{name}({ABI}) {{\n" + "\n".join(L) + "\n}\n"


DECLARATIONS = """declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
declare <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8>, <32 x i8>)
declare <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16>, <16 x i16>)
declare float @llvm.fma.f32(float, float, float)
declare <2 x float> @llvm.fma.v2f32(<2 x float>, <2 x float>, <2 x float>)
declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)
declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)
"""
