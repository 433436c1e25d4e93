"""4-bit groups of 32 (GGUF's Q4_K, Q4_0, Q4_1) on AVX-512 VNNI: a 16-wide integer tile that walks 256 weights
(one K-quant super-block, eight groups) per loop step, in LLVM IR.

Why: the VNNI tile of integer_tiles.py puts a pair of groups of 64 in one 64-byte register. With groups of 32 a pair
is 32 bytes, so those matrices ran on the 8-wide AVX2 tile (``vpmaddubsw`` + ``vpmaddwd``, and one scale and bias per
group computed in scalar code from the records) at ~16 GB/s in a Q4_K_M decode step, where the groups of 64 stream
at ~25-30. Here one register holds two pairs - four groups - and a step reads a whole super-block, so a K-quant
record's eight scales and eight biases are made as one vector each (8 int8 → float, times its float32 factor).

Layout read (the planar 4-bit codes, 32 bytes per pair p of groups: low nibbles group 2p, high nibbles 2p+1), per
weight row and step c: register A = code bytes [128c, 128c+64) = pairs 4c, 4c+1; B = the next 64. So

    A.lo lanes 0-7: group 8c+0, lanes 8-15: 8c+2      A.hi: 8c+1 | 8c+3
    B.lo:           group 8c+4,             8c+6      B.hi: 8c+5 | 8c+7

and each input row's int8 activations are arranged to match once per call (``arrange``: per block of 256, the groups
in the order 0 2 1 3 4 6 5 7), so a plane's 64 activations are one load.

Contract (integer_tiles.py's quantities: activations quantized per group of 32, ``sx_g``, ``x̂s_g``, weights
``w = s·q + b``), for weight row i and input row r:

    out[r, i] = hsum16(acc) + hsum8(bacc)
    per step c, in the order A.lo, A.hi, B.lo, B.hi:
        acc  = fma(float(vpdpbusd(plane, x)), [s_g·sx_g]×8 ‖ [s_g'·sx_g']×8, acc)     (g, g': the plane's groups)
    then  bacc = fma(b[8c..8c+8], x̂s[8c..8c+8], bacc)                               (lane j: group 8c+j)

hsum16 / hsum8: float_tiles.hsum's tree, halves added (0..7)+(8..15), then (0..3)+(4..7), (0,1)+(2,3), the two.
Every tile shape computes an element by that chain (batch invariant); a K-quant's records and its expanded float32
scales give the same products, so the records path has the same bits. Other bits than the AVX2 tile's (another
order), which is why ``tiles.widest`` decides per matrix, once, which of the two a host runs.
"""

import numpy as np

from . import half_scales
from .float_tiles import hsum, prefetch, stores
from .integer_tiles import _entry, _load
from .superblock_scales import RECORDS, scales_and_biases

STEP = 256  # weights per loop step: one K-quant super-block, eight groups of 32
ORDER = [0, 2, 1, 3, 4, 6, 5, 7]  # the groups of a step in the order of the planes' lanes (PLANES)
G = 32
# the four 64-byte planes of a step: (code register, nibble), and the two groups (of the step's eight) each holds
PLANES = (("A", "lo", 0, 2), ("A", "hi", 1, 3), ("B", "lo", 4, 6), ("B", "hi", 5, 7))


def arrange(xq: np.ndarray) -> np.ndarray:
    """int8 activations [m, k] (k a multiple of 256) with each block's eight groups of 32 in ``ORDER``: the
    activations of A.lo, A.hi, B.lo, B.hi one after another (the same values: no result moves)."""
    m, k = xq.shape  # group 4a + 2b + c goes to 4a + 2c + b: a transpose, cheaper than a gather (1 µs, not 4)
    return np.ascontiguousarray(xq.reshape(m, k // STEP, 2, 2, 2, G).transpose(0, 1, 2, 4, 3, 5)).reshape(m, k)


def _row_scalars(n: int, layout: str | None) -> list[str]:
    """Weight row n's eight scales %s8_{n} and biases %b8_{n} of step %c: read as float32 or 16-bit floats, or made
    from its k4 super-block record (superblock_scales.py: d f32 | m f32 | 8 × int8 sc | 8 × int8 mn; scale d·sc,
    bias -(m·mn))."""
    if layout is None:
        return _load(f"%s8_{n}", f"%sr{n}", "%gb", "<8 x float>") + _load(f"%b8_{n}", f"%br{n}", "%gb", "<8 x float>")
    if layout in half_scales.LAYOUTS:  # the step's eight groups from group 8c on (half_scales.py)
        return half_scales.scale_and_bias(f"%s8_{n}", f"%b8_{n}", f"%sr{n}", f"%br{n}", "%g8", layout, 8)
    if layout != "k4":
        raise ValueError(f"the VNNI tile for groups of 32 reads k4 super-block records, not {layout}")
    record = [f"  %rec{n} = add i64 %sr{n}, %rb"]
    return record + scales_and_biases(f"%s8_{n}", f"%b8_{n}", f"%rec{n}", "0", layout, 8)


def _body(NR: int, MR: int, layout: str | None) -> list[str]:
    """One step: the codes, activations and group scalars it reads, then per (weight row, input row) the four
    planes' products folded into %acc{n}_{r}_3 and the biases into %bacc{n}_{r}.n."""
    L = ["  %cb = mul i64 %c, 128", "  %gb = mul i64 %c, 32", "  %g8 = mul i64 %c, 8", "  %xo = mul i64 %c, 256"]
    if layout in RECORDS:
        L.append(f"  %rb = mul i64 %c, {RECORDS[layout][0]}")
    for n in range(NR):
        L += [f"  %wc{n} = add i64 %wr{n}, %cb", *prefetch(f"%pf{n}", f"%wc{n}", 128)]
        for reg, off in (("A", 0), ("B", 64)):
            L += _load(f"%cq{reg}{n}", f"%wc{n}", off, "<64 x i8>")
            L += [
                f"  %{reg}lo{n}.b = and <64 x i8> %cq{reg}{n}, splat (i8 15)",
                f"  %{reg}hi{n}.b = lshr <64 x i8> %cq{reg}{n}, splat (i8 4)",
                f"  %{reg}lo{n} = bitcast <64 x i8> %{reg}lo{n}.b to <16 x i32>",
                f"  %{reg}hi{n} = bitcast <64 x i8> %{reg}hi{n}.b to <16 x i32>",
            ]
        L += _row_scalars(n, layout)
    for r in range(MR):
        L += [f"  %xb{r} = add i64 %xr{r}, %xo", f"  %as{r} = add i64 %ar{r}, %ng4"]
        for h, (reg, nib, _, _) in enumerate(PLANES):  # arranged: the planes' activations one after another
            L += _load(f"%x{reg}{nib}{r}", f"%xb{r}", 64 * h, "<16 x i32>")
        L += _load(f"%sx8_{r}", f"%ar{r}", "%gb", "<8 x float>") + _load(f"%xs8_{r}", f"%as{r}", "%gb", "<8 x float>")
    for n in range(NR):
        for r in range(MR):
            t = f"{n}_{r}"
            L.append(f"  %kk_{t} = fmul <8 x float> %s8_{n}, %sx8_{r}")
            prev = f"%acc{t}"
            for h, (reg, nib, g0, g1) in enumerate(PLANES):
                lanes = ", ".join([f"i32 {g0}"] * 8 + [f"i32 {g1}"] * 8)
                L += [
                    f"  %i{t}_{h} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> zeroinitializer, "
                    f"<16 x i32> %{reg}{nib}{n}, <16 x i32> %x{reg}{nib}{r})",
                    f"  %f{t}_{h} = sitofp <16 x i32> %i{t}_{h} to <16 x float>",
                    f"  %k{t}_{h} = shufflevector <8 x float> %kk_{t}, <8 x float> poison, <16 x i32> <{lanes}>",
                    f"  %acc{t}_{h} = call <16 x float> @llvm.fma.v16f32(<16 x float> %f{t}_{h}, "
                    f"<16 x float> %k{t}_{h}, <16 x float> {prev})",
                ]
                prev = f"%acc{t}_{h}"
            L.append(
                f"  %bacc{t}.n = call <8 x float> @llvm.fma.v8f32(<8 x float> %b8_{n}, <8 x float> %xs8_{r}, "
                f"<8 x float> %bacc{t})"
            )
    return L


def microkernel(NR: int, MR: int, layout: str | None = None) -> str:
    """``@q4iw32_{NR}x{MR}`` (``@q4iw32_k4_…`` reading k4 super-block records) with tiles.py's ABI; ``groups``
    counts steps (super-blocks: k / 256), the side rows hold [sx_g for every group, then x̂s_g for every group]."""
    from .tiles import ABI

    pairs = [(n, r) for n in range(NR) for r in range(MR)]
    L = [*_entry(NR, MR, "mul i64 %groups, 32"), "loop:", "  %c = phi i64 [0, %entry], [%cn, %loop]"]
    for n, r in pairs:
        L.append(f"  %acc{n}_{r} = phi <16 x float> [zeroinitializer, %entry], [%acc{n}_{r}_3, %loop]")
        L.append(f"  %bacc{n}_{r} = phi <8 x float> [zeroinitializer, %entry], [%bacc{n}_{r}.n, %loop]")
    L += _body(NR, MR, layout)
    L += ["  %cn = add i64 %c, 1", "  %cd = icmp sge i64 %cn, %groups", "  br i1 %cd, label %exit, label %loop"]
    L.append("exit:")
    bsums = {}
    for n, r in pairs:
        bias, bsums[n, r] = hsum(f"%bacc{n}_{r}.n", 8, f"b{n}_{r}")
        L += bias
    L += stores({(n, r): f"%acc{n}_{r}_3" for n, r in pairs}, bsums, NR, MR, 16)
    L.append("  ret void")
    name = f"q4iw32{'_' + layout if layout else ''}_{NR}x{MR}"
    return f"define void @{name}({ABI}) {{\n" + "\n".join(L) + "\n}\n"
