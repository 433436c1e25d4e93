"""A prototype 4-bit VNNI tile with output columns in the vector lanes, against fs's q4iw tile (k in the lanes) on the
same codes, one thread; and fs's ``q4ic`` (cpu/column_tiles.py), the prototype as wired in.

    uv run nox -s bench -- q4_column_lanes
    uv run --all-packages --all-extras python benchmarks/q4_column_lanes.py [--rows 8 64] [--nc 2] [--mr 4]

Why: fs's q4iw tile (cpu/integer_tiles.py) puts 16 consecutive groups of 4 weights *of one output* in a register's
lanes, so each ``vpdpbusd`` (64 multiply-adds) of each (weight row, input row) pair is followed by that pair's own
int-to-float conversion, a scalar product of the two group scales, a spread and two FMAs: about one instruction in
four does the multiplying. With 16 *outputs* in the lanes (llama.cpp's repacked Q4_0 GEMM kernels do this), one
group of 64 weights is 16 ``vpdpbusd`` per (16 outputs, input row), each reading 4 activation bytes broadcast from
memory, and the float work - convert, scale, FMA, bias FMA - happens once per 16 ``vpdpbusd``:

    per group g (64 weights), 16 outputs, input row r:   I = sum over 16 chunks of vpdpbusd(codes, x[r, 4c:4c+4])
                                                         acc = fma(float(I), s[g, cols] * sx[r, g], acc)
                                                         acc = fma(b[g, cols], sum_x[r, g], acc)

Each output is still one written-down chain over its groups in order (batch invariant: nothing depends on M or on
the other rows). The codes are repacked per 16 columns: byte 4l + j of a chunk pair holds column l's weight 4c + j
in its low nibble and 4c + 4 + j in its high one. Checked against float64 on its own quantized activations; the
prototype (LLVM IR, AVX-512 VNNI), fs's q4iw and fs's q4ic run the same 3072×1024 matrix from cache, rounds
interleaved, best kept: arithmetic, not memory, is what is compared.
"""

import argparse
import ctypes
import sys
import time

import numpy as np

from fs_model.cpu import FEATURES, SWITCHES, threads
from fs_model.cpu.affine import AffineLinear, from_mlx
from fs_model.cpu.column_tiles import arrange
from fs_model.cpu.llvm_ir import compile_ir
from fs_weights import quantize

G = 64  # weights a group: fs's affine 4-bit default
FEATURES_NEEDED = ("avx512f", "avx512bw", "avx512vnni")
DECLARATIONS = """declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
"""


def load(name: str, address: str, ty: str) -> list[str]:
    return [f"  {name}.p = inttoptr i64 {address} to ptr", f"  {name} = load {ty}, ptr {name}.p, align 1"]


def splat(name: str, scalar: str, ty: str, elt: str) -> list[str]:
    return [
        f"  {name}.0 = insertelement {ty} poison, {elt} {scalar}, i32 0",
        f"  {name} = shufflevector {ty} {name}.0, {ty} poison, <16 x i32> zeroinitializer",
    ]


def tile(NC: int, MR: int) -> str:
    """``void q4c(pw, ps, pb, nb, px, psx, pxs, po, n, k)``: out[r, 16·b + l] for column blocks b < nb (NC at a time)
    and MR input rows. pw: repacked codes, per block [k/G][8][64] bytes; ps / pb: per block [k/G][16] float32
    scales / biases; px: int8 rows (stride k); psx / pxs: per row [k/G] float32 activation scales / sums; po: float32
    rows (stride n)."""
    L = [
        "define void @q4c(i64 %pw, i64 %ps, i64 %pb, i64 %nb, i64 %px, i64 %psx, i64 %pxs, i64 %po, i64 %n, i64 %k) {",
        "entry:",
        "  %ng = udiv i64 %k, 64",
        "  %wblk = mul i64 %k, 8",  # code bytes a column block: k/64 groups of 8 × 64 bytes
        "  %sblk = mul i64 %ng, 64",  # scale bytes a column block: k/64 groups of 16 floats
        "  br label %blk",
        "blk:",
        "  %b = phi i64 [0, %entry], [%bn, %blkend]",
    ]
    for c in range(NC):
        L += [
            f"  %bc{c} = add i64 %b, {c}",
            f"  %wo{c} = mul i64 %bc{c}, %wblk",
            f"  %wb{c} = add i64 %pw, %wo{c}",
            f"  %so{c} = mul i64 %bc{c}, %sblk",
            f"  %sb{c} = add i64 %ps, %so{c}",
            f"  %bb{c} = add i64 %pb, %so{c}",
        ]
    L += ["  br label %grp", "grp:", "  %g = phi i64 [0, %blk], [%gn, %grp]"]
    for c in range(NC):
        for r in range(MR):
            L.append(f"  %acc{c}_{r} = phi <16 x float> [zeroinitializer, %blk], [%accb{c}_{r}, %grp]")
    L += ["  %gw = mul i64 %g, 512", "  %gx = mul i64 %g, 64", "  %gs = mul i64 %g, 64", "  %g4 = mul i64 %g, 4"]
    for r in range(MR):
        L += [f"  %xr{r} = mul i64 %k, {r}", f"  %xb{r} = add i64 %px, %xr{r}", f"  %xg{r} = add i64 %xb{r}, %gx"]
    for c in range(NC):
        for r in range(MR):
            L.append(f"  %I{c}_{r}_0 = or <16 x i32> zeroinitializer, zeroinitializer")
    for p in range(8):  # chunk pairs: low nibbles chunk 2p, high nibbles chunk 2p + 1
        for c in range(NC):
            L += [f"  %wa{c}_{p} = add i64 %wb{c}, %gw", f"  %wp{c}_{p} = add i64 %wa{c}_{p}, {64 * p}"]
            L += load(f"%cq{c}_{p}", f"%wp{c}_{p}", "<64 x i8>")
            L += [
                f"  %lo{c}_{p}.b = and <64 x i8> %cq{c}_{p}, splat (i8 15)",
                f"  %hi{c}_{p}.b = lshr <64 x i8> %cq{c}_{p}, splat (i8 4)",
                f"  %lo{c}_{p} = bitcast <64 x i8> %lo{c}_{p}.b to <16 x i32>",
                f"  %hi{c}_{p} = bitcast <64 x i8> %hi{c}_{p}.b to <16 x i32>",
            ]
        for h, plane in enumerate(("lo", "hi")):
            ch = 2 * p + h
            for r in range(MR):
                L += [f"  %xa{r}_{ch} = add i64 %xg{r}, {4 * ch}"]
                L += load(f"%xw{r}_{ch}", f"%xa{r}_{ch}", "i32")
                L += splat(f"%xs{r}_{ch}", f"%xw{r}_{ch}", "<16 x i32>", "i32")
                for c in range(NC):
                    L.append(
                        f"  %I{c}_{r}_{ch + 1} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> "
                        f"%I{c}_{r}_{ch}, <16 x i32> %{plane}{c}_{p}, <16 x i32> %xs{r}_{ch})"
                    )
    for c in range(NC):
        L += [f"  %sga{c} = add i64 %sb{c}, %gs", f"  %bga{c} = add i64 %bb{c}, %gs"]
        L += load(f"%sv{c}", f"%sga{c}", "<16 x float>") + load(f"%bv{c}", f"%bga{c}", "<16 x float>")
    for r in range(MR):
        L += [f"  %sxr{r} = mul i64 %ng, {4 * r}", f"  %sxb{r} = add i64 %psx, %sxr{r}"]
        L += [f"  %sxa{r} = add i64 %sxb{r}, %g4"]
        L += [f"  %xsb{r} = add i64 %pxs, %sxr{r}", f"  %xsa{r} = add i64 %xsb{r}, %g4"]
        L += load(f"%sx{r}", f"%sxa{r}", "float") + load(f"%sm{r}", f"%xsa{r}", "float")
        L += splat(f"%sxv{r}", f"%sx{r}", "<16 x float>", "float")
        L += splat(f"%smv{r}", f"%sm{r}", "<16 x float>", "float")
        for c in range(NC):
            t = f"{c}_{r}"
            L += [
                f"  %f{t} = sitofp <16 x i32> %I{t}_16 to <16 x float>",
                f"  %k{t} = fmul <16 x float> %sv{c}, %sxv{r}",
                f"  %acca{t} = call <16 x float> @llvm.fma.v16f32(<16 x float> %f{t}, <16 x float> %k{t}, "
                f"<16 x float> %acc{t})",
                f"  %accb{t} = call <16 x float> @llvm.fma.v16f32(<16 x float> %bv{c}, <16 x float> %smv{r}, "
                f"<16 x float> %acca{t})",
            ]
    L += ["  %gn = add i64 %g, 1", "  %gd = icmp sge i64 %gn, %ng", "  br i1 %gd, label %blkend, label %grp", "blkend:"]
    for c in range(NC):
        for r in range(MR):
            L += [
                f"  %oc{c}_{r} = mul i64 %b, 16",
                f"  %od{c}_{r} = add i64 %oc{c}_{r}, {16 * c}",
                f"  %orow{c}_{r} = mul i64 %n, {r}",
                f"  %oi{c}_{r} = add i64 %orow{c}_{r}, %od{c}_{r}",
                f"  %ob{c}_{r} = mul i64 %oi{c}_{r}, 4",
                f"  %oa{c}_{r} = add i64 %po, %ob{c}_{r}",
                f"  %op{c}_{r} = inttoptr i64 %oa{c}_{r} to ptr",
                f"  store <16 x float> %accb{c}_{r}, ptr %op{c}_{r}, align 4",
            ]
    L += [f"  %bn = add i64 %b, {NC}", "  %bd = icmp sge i64 %bn, %nb", "  br i1 %bd, label %exit, label %blk"]
    return "\n".join([*L, "exit:", "  ret void", "}"]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[8, 64], help="input rows (M), multiples of --mr")
    ap.add_argument("--nc", type=int, default=2, help="16-column blocks per prototype tile")
    ap.add_argument("--mr", type=int, default=4, help="input rows per prototype tile")
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    if not FEATURES.issuperset(FEATURES_NEEDED):
        print("skipped: the prototype needs AVX-512 BW + VNNI; this CPU has not")
        return
    n, k, NC, MR = 3072, 1024, a.nc, a.mr
    rng = np.random.default_rng(0)
    wq, ws, wb = quantize(rng.standard_normal((n, k)).astype(np.float32) * 0.05, bits=4, group_size=G)
    codes = ((wq[:, :, None] >> (4 * np.arange(8, dtype=np.uint32))) & 15).astype(np.uint8).reshape(n, k)
    SWITCHES.column_tiles = False  # fs's q4iw: the tile the prototype was written against
    fs = AffineLinear(from_mlx(wq, ws, wb, 4, G))  # fs's planar nibbles, as a loaded 4-bit checkpoint has them
    SWITCHES.column_tiles = True  # and fs's q4ic (cpu/column_tiles.py), the prototype as wired in
    wired = AffineLinear(from_mlx(wq, ws, wb, 4, G))
    if fs.tiles is None or fs.tiles.kind != "q4iw":
        print(f"skipped: fs runs this matrix on {fs.tiles.kind if fs.tiles else 'no tiles'}, not q4iw")
        return
    # fs's own arrangement (cpu/column_tiles.py, as the prototype was first written): per 16-column block, per
    # group, 8 pairs of 64 bytes; scales and biases [block, group, lane]
    packed, sc, bi = arrange(fs.w.codes, ws, wb, G)
    blocks = n // 16
    signature = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 10)
    f = compile_ir(DECLARATIONS + tile(NC, MR), FEATURES_NEEDED, {"q4c": signature})
    assert f is not None
    q4c = f["q4c"]
    print(f"4-bit groups of {G}, {n}x{k}, one thread, best of {a.rounds} interleaved rounds; prototype "
          f"{NC}x16 columns x {MR} rows")  # fmt: skip
    for M in a.rows:
        x = rng.standard_normal((M, k)).astype(np.float32)
        g = x.reshape(M, k // G, G)
        sx = (np.abs(g).max(-1) / 127).astype(np.float32)
        xq = np.round(g / sx[..., None]).astype(np.int8).reshape(M, k)
        sums = g.sum(-1, dtype=np.float32)
        out = np.zeros((M, n), np.float32)

        def prototype() -> None:
            for r0 in range(0, M, MR):
                q4c(packed.ctypes.data, sc.ctypes.data, bi.ctypes.data, blocks, xq[r0:].ctypes.data,
                    sx[r0:].ctypes.data, sums[r0:].ctypes.data, out[r0:].ctypes.data, n, k)  # fmt: skip

        prototype()
        dots = np.einsum("mgi,ngi->mng", xq.reshape(M, -1, G).astype(np.float64),
                         codes.reshape(n, -1, G).astype(np.float64))  # fmt: skip
        ref = (dots * ws[None] * sx[:, None] + wb[None] * sums[:, None]).sum(-1)
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        runs = {"prototype": prototype, "fs q4iw": lambda x=x: fs.matmul(x)}
        if wired.tiles is not None and wired.tiles.kind == "q4ic":
            runs["fs q4ic"] = lambda x=x: wired.matmul(x)
        best = dict.fromkeys(runs, float("inf"))
        with threads.pinned(1):
            for run in runs.values():
                run()
            for _ in range(a.rounds):
                for name, run in runs.items():
                    t0 = time.perf_counter()
                    run()
                    best[name] = min(best[name], time.perf_counter() - t0)
        print(f"  M = {M}: relative error against float64 on its own quantized activations {err:.1e}")
        for name, t in best.items():
            rate = 2 * M * n * k / t / 1e9
            print(f"    {name:10s} {t * 1e3:6.2f} ms  {rate:6.1f} GFLOP/s  {best['fs q4iw'] / t:.2f}× fs")


if __name__ == "__main__":
    sys.exit(main())
