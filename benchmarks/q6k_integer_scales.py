"""A prototype Q6_K tile the way llama.cpp multiplies K-quants, against fs's q6iw tile on the same codes, one thread.

    uv run nox -s bench -- q6k_integer_scales
    uv run --all-packages --all-extras python benchmarks/q6k_integer_scales.py [--rows 64] [--mr 4] [--rounds 10]

Why: fs's packed 6-bit tile quantizes activations per weight group (16 weights for Q6_K), so every 64 weights of
every (weight row, input row) pair cost a ``vpdpbusd``, an int-to-float conversion, a product of the two rows' group
scales, a spread and two FMAs (cpu/packed_codes.py). llama.cpp quantizes activations per 256 (Q8_K) and applies the
6-bit sub-block scales in integers. This prototype (LLVM IR, AVX-512 BW + VNNI, not wired into fs) does that:

    per 64 weights and pair:  p = pmaddubsw(codes, xq) - pmaddubsw(32, xq)      (Q6_K's offset; |p| <= 8128)
                              I = vpdpwssd(I, p, scales)                         (int32, exact within a super-block)
    per 256 weights and pair: acc = fma(float(I), d · sx, acc)

and prints GFLOP/s for it, for the same without the offset's two operations (``--no-offset``'s upper bound: wrong
results, what folding the offset into per-super-block sums could reach), and for fs's q6iw tile on the same matrix
(float32 scales per group; ``fs_model.cpu.affine.AffineLinear`` on one thread), rounds interleaved, best kept.
The prototype's output is checked against a float64 product of its own quantized activations (relative error
printed). A 3072×1024 matrix, rows in cache: arithmetic, not memory, is what is compared.
"""

import argparse
import ctypes
import sys
import time

import numpy as np

from fs_model.cpu import FEATURES, threads
from fs_model.cpu.affine import AffineLinear, AffineWeight
from fs_model.cpu.llvm_ir import compile_ir
from fs_model.cpu.packed_codes import pack

PF = 32768  # bytes ahead the codes are prefetched, as fs's tiles do
FEATURES_NEEDED = ("avx512f", "avx512bw", "avx512vnni")
DECLARATIONS = """declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
declare <32 x i16> @llvm.x86.avx512.pmaddubs.w.512(<64 x i8>, <64 x i8>)
declare <16 x i32> @llvm.x86.avx512.vpdpwssd.512(<16 x i32>, <16 x i32>, <16 x i32>)
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
declare float @llvm.vector.reduce.fadd.v16f32(float, <16 x float>)
"""


def load(name: str, address: str, ty: str) -> list[str]:
    return [f"  {name}.p = inttoptr i64 {address} to ptr", f"  {name} = load {ty}, ptr {name}.p, align 1"]


def unpack(t: str, address: str) -> list[str]:
    """%cc{t}: the 64 codes of the packed block at ``address`` in order (packed_codes.py's layout)."""
    every, half = ", ".join(f"i32 {j}" for j in range(64)), ", ".join(f"i32 {j}" for j in range(32))
    return [
        f"  %pfa{t} = add i64 {address}, {PF}",
        f"  %pfp{t} = inttoptr i64 %pfa{t} to ptr",
        f"  call void @llvm.prefetch.p0(ptr %pfp{t}, i32 0, i32 2, i32 1)",
        *load(f"%lv{t}", address, "<32 x i8>"),
        f"  %ha{t} = add i64 {address}, 32",
        *load(f"%hb{t}", f"%ha{t}", "<16 x i8>"),
        f"  %l0{t} = and <32 x i8> %lv{t}, splat (i8 15)",
        f"  %l1{t} = lshr <32 x i8> %lv{t}, splat (i8 4)",
        f"  %t0{t} = shl <16 x i8> %hb{t}, splat (i8 4)",
        f"  %t1{t} = shl <16 x i8> %hb{t}, splat (i8 2)",
        f"  %t3{t} = lshr <16 x i8> %hb{t}, splat (i8 2)",
        f"  %h01{t} = shufflevector <16 x i8> %t0{t}, <16 x i8> %t1{t}, <32 x i32> <{half}>",
        f"  %h23{t} = shufflevector <16 x i8> %hb{t}, <16 x i8> %t3{t}, <32 x i32> <{half}>",
        f"  %m01{t} = and <32 x i8> %h01{t}, splat (i8 48)",
        f"  %m23{t} = and <32 x i8> %h23{t}, splat (i8 48)",
        f"  %hm{t} = shufflevector <32 x i8> %m01{t}, <32 x i8> %m23{t}, <64 x i32> <{every}>",
        f"  %low{t} = shufflevector <32 x i8> %l0{t}, <32 x i8> %l1{t}, <64 x i32> <{every}>",
        f"  %cc{t} = or <64 x i8> %low{t}, %hm{t}",
    ]


def tile(MR: int, offset: bool) -> str:
    """``void q6s(pw, sw, psc, pd, n, px, psx, po, k)``: out[r, i] for weight rows i < n (packed codes at pw, row
    stride sw; int16 group scales at psc; float32 d per 256 at pd) and MR int8 input rows at px (row stride k, float32
    scales per 256 at psx)."""
    spread = ", ".join(f"i32 {lane // 8}" for lane in range(32))  # 16-bit lane l holds weights 2l, 2l+1: group l/8
    L = [
        "define void @q6s(i64 %pw, i64 %sw, i64 %psc, i64 %pd, i64 %n, i64 %px, i64 %psx, i64 %po, i64 %k) {",
        "entry:",
        "  %nsb = udiv i64 %k, 256",
        "  %scs = udiv i64 %k, 8",
        "  %ds = udiv i64 %k, 64",
        "  br label %row",
        "row:",
        "  %i = phi i64 [0, %entry], [%in, %rowend]",
        "  %wro = mul i64 %i, %sw",
        "  %wr = add i64 %pw, %wro",
        "  %sco = mul i64 %i, %scs",
        "  %scr = add i64 %psc, %sco",
        "  %dro = mul i64 %i, %ds",
        "  %dr = add i64 %pd, %dro",
        "  br label %sb",
        "sb:",
        "  %s = phi i64 [0, %row], [%sn, %sb]",
        *[f"  %acc{r} = phi <16 x float> [zeroinitializer, %row], [%acc{r}.n, %sb]" for r in range(MR)],
        "  %s4 = mul i64 %s, 4",
    ]
    for j in range(4):  # the super-block's four blocks of 64
        t = f"_{j}"
        L += [f"  %c{t} = add i64 %s4, {j}", f"  %cb{t} = mul i64 %c{t}, 48", f"  %wa{t} = add i64 %wr, %cb{t}"]
        L += unpack(t, f"%wa{t}")
        L += [f"  %sco{t} = mul i64 %c{t}, 8", f"  %sca{t} = add i64 %scr, %sco{t}"]
        L += load(f"%sc4{t}", f"%sca{t}", "<4 x i16>")
        L += [
            f"  %sc32{t} = shufflevector <4 x i16> %sc4{t}, <4 x i16> poison, <32 x i32> <{spread}>",
            f"  %scw{t} = bitcast <32 x i16> %sc32{t} to <16 x i32>",
            f"  %xo{t} = mul i64 %c{t}, 64",
        ]
        for r in range(MR):
            u = f"{t}_{r}"
            prev = "zeroinitializer" if j == 0 else f"%I_{j - 1}_{r}"
            L += [
                f"  %xr{u} = mul i64 %k, {r}",
                f"  %xb{u} = add i64 %px, %xr{u}",
                f"  %xa{u} = add i64 %xb{u}, %xo{t}",
            ]
            L += load(f"%xv{u}", f"%xa{u}", "<64 x i8>")
            L.append(f"  %p{u} = call <32 x i16> @llvm.x86.avx512.pmaddubs.w.512(<64 x i8> %cc{t}, <64 x i8> %xv{u})")
            if offset:
                L += [
                    f"  %q{u} = call <32 x i16> @llvm.x86.avx512.pmaddubs.w.512(<64 x i8> splat (i8 32), "
                    f"<64 x i8> %xv{u})",
                    f"  %pd{u} = sub <32 x i16> %p{u}, %q{u}",
                ]
            else:
                L.append(f"  %pd{u} = or <32 x i16> %p{u}, zeroinitializer")
            L += [
                f"  %pw{u} = bitcast <32 x i16> %pd{u} to <16 x i32>",
                f"  %I{u} = call <16 x i32> @llvm.x86.avx512.vpdpwssd.512(<16 x i32> {prev}, <16 x i32> %pw{u}, "
                f"<16 x i32> %scw{t})",
            ]
    L += ["  %dso = mul i64 %s, 4", "  %dsa = add i64 %dr, %dso", *load("%dd", "%dsa", "float")]
    for r in range(MR):
        L += [
            f"  %sxo{r} = mul i64 %ds, {r}",
            f"  %sxb{r} = add i64 %psx, %sxo{r}",
            f"  %sxa{r} = add i64 %sxb{r}, %dso",
        ]
        L += load(f"%sx{r}", f"%sxa{r}", "float")
        L += [
            f"  %dx{r} = fmul float %dd, %sx{r}",
            f"  %dx{r}.v = insertelement <16 x float> poison, float %dx{r}, i32 0",
            f"  %dxs{r} = shufflevector <16 x float> %dx{r}.v, <16 x float> poison, <16 x i32> zeroinitializer",
            f"  %f{r} = sitofp <16 x i32> %I_3_{r} to <16 x float>",
            f"  %acc{r}.n = call <16 x float> @llvm.fma.v16f32(<16 x float> %f{r}, <16 x float> %dxs{r}, "
            f"<16 x float> %acc{r})",
        ]
    L += ["  %sn = add i64 %s, 1", "  %sd = icmp sge i64 %sn, %nsb", "  br i1 %sd, label %rowend, label %sb", "rowend:"]
    for r in range(MR):
        L += [
            f"  %h{r} = call float @llvm.vector.reduce.fadd.v16f32(float 0.0, <16 x float> %acc{r}.n)",
            f"  %oo{r} = mul i64 %n, {r}",
            f"  %oi{r} = add i64 %oo{r}, %i",
            f"  %ob{r} = mul i64 %oi{r}, 4",
            f"  %oa{r} = add i64 %po, %ob{r}",
            f"  %op{r} = inttoptr i64 %oa{r} to ptr",
            f"  store float %h{r}, ptr %op{r}, align 4",
        ]
    L += ["  %in = add i64 %i, 1", "  %id = icmp sge i64 %in, %n", "  br i1 %id, label %exit, label %row"]
    return "\n".join([*L, "exit:", "  ret void", "}"]) + "\n"


def compiled(MR: int, offset: bool):  # type: ignore[no-untyped-def]
    """The prototype, compiled as fs's own tiles are (llvm_ir.compile_ir: the host's target, opt 3)."""
    signature = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 9)
    fns = compile_ir(DECLARATIONS + tile(MR, offset), FEATURES_NEEDED, {"q6s": signature})
    assert fns is not None
    return fns["q6s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64, help="input rows (M), a multiple of --mr")
    ap.add_argument("--mr", type=int, default=4, help="input rows per prototype tile")
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    if not FEATURES.issuperset(FEATURES_NEEDED):
        print("skipped: the prototype needs AVX-512 BW + VNNI (vpdpwssd); this CPU has not")
        return
    n, k, M, MR = 3072, 1024, a.rows, a.mr
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 64, (n, k), dtype=np.uint8)
    sc = rng.integers(-128, 128, (n, k // 16)).astype(np.int16)
    d = (rng.random((n, k // 256), dtype=np.float32) * 1e-3).astype(np.float32)
    x = rng.standard_normal((M, k)).astype(np.float32)
    blocks = x.reshape(M, k // 256, 256)
    sx = (np.abs(blocks).max(-1) / 127).astype(np.float32)
    xq = np.round(blocks / sx[..., None]).astype(np.int8).reshape(M, k)
    packed = pack(codes, 6)
    out = np.zeros((M, n), np.float32)

    def prototype(f) -> None:  # type: ignore[no-untyped-def]
        for r0 in range(0, M, MR):
            f(packed.ctypes.data, packed.strides[0], sc.ctypes.data, d.ctypes.data, n, xq[r0:].ctypes.data,
              sx[r0:].ctypes.data, out[r0:].ctypes.data, k)  # fmt: skip

    with_offset, without = compiled(MR, True), compiled(MR, False)
    prototype(with_offset)
    w = (d.repeat(16, 1).astype(np.float64) * sc).repeat(16, 1) * (codes.astype(np.float64) - 32)
    ref = (xq.astype(np.float64) * np.repeat(sx, 256, 1)) @ w.T
    err = float(np.abs(out - ref).max() / np.abs(ref).max())
    scales = (d.repeat(16, 1) * sc).astype(np.float32)  # fs's tile: float32 scale and bias per group of 16
    fs = AffineLinear(AffineWeight(codes=packed, scales=scales, biases=scales * np.float32(-32), bits=6, group_size=16))
    if fs.tiles is None or fs.tiles.kind != "q6iw":
        print(f"skipped: fs runs this matrix on {fs.tiles.kind if fs.tiles else 'no tiles'}, not q6iw")
        return
    runs = {"prototype": lambda: prototype(with_offset), "without the offset": lambda: prototype(without),
            "fs q6iw": lambda: fs.matmul(x)}  # fmt: skip
    best = dict.fromkeys(runs, float("inf"))
    with threads.pinned(1):
        for run in runs.values():
            run()
        for _ in range(a.rounds):
            for name, run in runs.items():
                t0 = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - t0)
    print(f"Q6_K {n}x{k}, {M} rows, one thread, best of {a.rounds} interleaved rounds; prototype MR {MR}, "
          f"relative error against float64 on its own quantized activations {err:.1e}")  # fmt: skip
    for name, t in best.items():
        print(f"  {name:20s} {t * 1e3:6.2f} ms  {2 * M * n * k / t / 1e9:6.1f} GFLOP/s  {best['fs q6iw'] / t:.2f}× fs")


if __name__ == "__main__":
    sys.exit(main())
