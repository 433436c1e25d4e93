"""GGUF's Q6_K kept in 6 bits: codes packed three bytes to four weights, and the integer tiles that read them (LLVM IR).

Why: a Q6_K tensor's codes are 6-bit (0..63, groups of 16), and until now fs held each in a byte - the 8-bit tile's
format. Q6_K is the lm_head of every Q4_K_M / Q5_K_M file (Qwen3-0.6B's tied 151,936 × 1024 embedding, the largest
matrix) and half the layers' v and down projections; a decode step streams them whole, so a byte per code is a
third more bytes than the file has (1.08 bytes per weight with the super-block records, 0.82 in the file). Packed,
the codes take 0.75 bytes per weight and a step reads what the file holds (0.83).

Layout, per weight row and per block of 64 weights c[0..63] (48 bytes; k a multiple of 64):

    bytes  0..31: c[j] & 15 | (c[j + 32] & 15) << 4                         (the low nibbles, two per byte)
    bytes 32..47: c[j] >> 4 | (c[j + 16] >> 4) << 2 | (c[j + 32] >> 4) << 4 | (c[j + 48] >> 4) << 6   (the top 2 bits)

so a block unpacks with shifts and masks on 16-byte vectors, into its four groups of 16 in order.

Why integer dot products: unpacking costs instructions, and the float 8-bit tile was already near its arithmetic
limit (a packed float tile measured 1.15x slower than the byte-per-code one, fewer bytes or not). With int8
activations (integer_tiles.py's quantities, groups of 16: ``sx_g = max|x_g| / 127``, ``x̂s_g = sx_g·Σxq_g``) one
``vpdpbusd`` multiplies 64 codes (AVX2: ``vpmaddubsw`` + ``vpmaddwd`` 32; 63 · 127 · 2 fits 16 bits), as llama.cpp
multiplies Q6_K by activations quantized to int8 (per 256, Q8_K; per 16 here). Contract, for weight row i and input
row r, per block c in order (its four groups g = 4c..4c+3 are four int32 lanes each, in order):

    acc  = fma(float(integer sums), [s_g · sx_g, each over its group's lanes], acc)   (AVX2: two halves of 8 lanes)
    bacc = fma(b[4c..4c+4], x̂s[4c..4c+4], bacc)                                     (4 lanes: group 4c + j)
    out[r, i] = hsum(acc) + hsum(bacc)                       (float_tiles.hsum's tree, on W lanes and on 4)

Every tile shape computes an element by that chain (batch invariant); the records (k6: ``s = d·sc``, ``b = -32·s``)
and the expanded float32 scales give the same products, so the same bits. Packing is a storage decision, made in
``keep_packed``: only where these tiles run (AVX2 + FMA, int8 activations on); elsewhere Q6_K keeps a byte per code.
"""

from typing import Any

import numpy as np

from .float_tiles import hsum, prefetch, store
from .integer_tiles import _entry, _load
from .superblock_scales import MINUS_32, RECORDS

BLOCK = 64  # weights per packed block (48 bytes): four groups of 16
G = 16


def pack(codes: np.ndarray) -> np.ndarray:
    """uint8 codes [n, k] (every one < 64, k % 64 == 0) -> the packed layout, uint8 [n, k / 64 · 48]."""
    n, k = codes.shape
    if k % BLOCK or (codes.size and int(codes.max()) >= 64):
        raise ValueError(f"6-bit packing needs codes below 64 and rows of a multiple of {BLOCK} (got {k})")
    c = codes.reshape(n, k // BLOCK, BLOCK)
    low = (c[..., :32] & 15) | ((c[..., 32:] & 15) << 4)
    top = c >> 4
    high = top[..., :16] | (top[..., 16:32] << 2) | (top[..., 32:48] << 4) | (top[..., 48:] << 6)
    return np.concatenate([low, high], axis=2).reshape(n, -1)


def unpack(packed: np.ndarray) -> np.ndarray:
    """The inverse of ``pack``: uint8 [n, k / 64 · 48] -> uint8 codes [n, k]."""
    n = packed.shape[0]
    b = packed.reshape(n, -1, 48)
    low, high = b[..., :32], b[..., 32:]
    nib = np.concatenate([low & 15, low >> 4], axis=2)
    top = np.concatenate([(high >> s) & 3 for s in (0, 2, 4, 6)], axis=2)
    return (nib | (top << 4)).reshape(n, -1)


def keep_packed(w: Any) -> Any:
    """A Q6_K matrix (an 8-bit AffineWeight with k6 super-block records) in 6 bits where this CPU's tiles run the
    packed form (``tiles.applies("q6i", …)``: AVX2 + FMA, int8 activations, groups of 16, k % 64 == 0); otherwise
    as it is."""
    from dataclasses import replace

    from . import tiles

    if w.bits != 8 or w.records is None or w.records[0] != "k6" or not tiles.applies("q6i", w.shape[1], w.group_size):
        return w
    return replace(w, codes=pack(w.codes), bits=6)


def _codes(n: int, W: int) -> list[str]:
    """Weight row n's block at step %c unpacked: 64 codes (0..63) in order, as %cv{n} (<16 x i32>, VNNI) or as
    %cv{n}_0 and %cv{n}_1 (<32 x i8> each: weights 0-31, 32-63)."""
    L = [f"  %wc{n} = add i64 %wr{n}, %cb", *prefetch(f"%pf{n}", f"%wc{n}")]
    L += _load(f"%lv{n}", f"%wc{n}", 0, "<32 x i8>") + _load(f"%hb{n}", f"%wc{n}", 32, "<16 x i8>")
    L += [f"  %l0{n} = and <32 x i8> %lv{n}, splat (i8 15)", f"  %l1{n} = lshr <32 x i8> %lv{n}, splat (i8 4)"]
    if W == 16:  # the top bits of quarter q sit at bits 2q: shift each quarter's words to bits 4-5 (vpsllvw/vpsrlvw)
        every = ", ".join(f"i32 {j}" for j in range(64))
        rep = ", ".join(f"i32 {j % 16}" for j in range(64))
        left = ", ".join(f"i16 {s}" for s in [4] * 8 + [2] * 8 + [0] * 16)
        right = ", ".join(f"i16 {s}" for s in [0] * 24 + [2] * 8)
        L += [
            f"  %low{n} = shufflevector <32 x i8> %l0{n}, <32 x i8> %l1{n}, <64 x i32> <{every}>",
            f"  %rep{n} = shufflevector <16 x i8> %hb{n}, <16 x i8> poison, <64 x i32> <{rep}>",
            f"  %rw{n} = bitcast <64 x i8> %rep{n} to <32 x i16>",
            f"  %rl{n} = shl <32 x i16> %rw{n}, <{left}>",
            f"  %rr{n} = lshr <32 x i16> %rl{n}, <{right}>",
            f"  %hi{n} = bitcast <32 x i16> %rr{n} to <64 x i8>",
            f"  %hm{n} = and <64 x i8> %hi{n}, splat (i8 48)",
            f"  %cc{n} = or <64 x i8> %low{n}, %hm{n}",
            f"  %cv{n} = bitcast <64 x i8> %cc{n} to <16 x i32>",
        ]
        return L
    both = ", ".join(f"i32 {j}" for j in range(32))
    L += [  # AVX2: per quarter with immediate shifts, then pairs of quarters
        f"  %t0{n} = shl <16 x i8> %hb{n}, splat (i8 4)",
        f"  %t1{n} = shl <16 x i8> %hb{n}, splat (i8 2)",
        f"  %t3{n} = lshr <16 x i8> %hb{n}, splat (i8 2)",
        f"  %h01{n} = shufflevector <16 x i8> %t0{n}, <16 x i8> %t1{n}, <32 x i32> <{both}>",
        f"  %h23{n} = shufflevector <16 x i8> %hb{n}, <16 x i8> %t3{n}, <32 x i32> <{both}>",
        f"  %m01{n} = and <32 x i8> %h01{n}, splat (i8 48)",
        f"  %m23{n} = and <32 x i8> %h23{n}, splat (i8 48)",
        f"  %cv{n}_0 = or <32 x i8> %l0{n}, %m01{n}",
        f"  %cv{n}_1 = or <32 x i8> %l1{n}, %m23{n}",
    ]
    return L


def _scales(n: int, layout: str | None) -> list[str]:
    """Weight row n's four scales %s4_{n} and biases %b4_{n} (<4 x float>) of step %c's groups."""
    if layout is None:
        return _load(f"%s4_{n}", f"%sr{n}", "%g4b", "<4 x float>") + _load(f"%b4_{n}", f"%br{n}", "%g4b", "<4 x float>")
    return [  # record c/4 of the row (%ro: its offset): d f32 | 16 × int8 sc; this block's four at %rj4
        f"  %rec{n} = add i64 %sr{n}, %ro",
        f"  %recs{n} = add i64 %rec{n}, %rj4",
        *_load(f"%d{n}", f"%rec{n}", 0, "float"),
        f"  %d{n}.0 = insertelement <4 x float> poison, float %d{n}, i32 0",
        f"  %dv{n} = shufflevector <4 x float> %d{n}.0, <4 x float> poison, <4 x i32> zeroinitializer",
        *_load(f"%sc{n}.i", f"%recs{n}", 0, "<4 x i8>"),
        f"  %sc{n} = sitofp <4 x i8> %sc{n}.i to <4 x float>",
        f"  %s4_{n} = fmul <4 x float> %dv{n}, %sc{n}",
        f"  %b4_{n} = fmul <4 x float> %s4_{n}, splat (float {MINUS_32})",
    ]


def _products(n: int, r: int, W: int) -> list[str]:
    """Weight row n times input row r for step %c, folded into %acc{n}_{r}.n and %bacc{n}_{r}.n."""
    t = f"{n}_{r}"
    L = [f"  %k4_{t} = fmul <4 x float> %s4_{n}, %sx4_{r}"]
    if W == 16:
        lanes = ", ".join(f"i32 {j // 4}" for j in range(16))
        L += [
            f"  %i{t} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> zeroinitializer, <16 x i32> %cv{n}, "
            f"<16 x i32> %xv{r})",
            f"  %f{t} = sitofp <16 x i32> %i{t} to <16 x float>",
            f"  %k{t} = shufflevector <4 x float> %k4_{t}, <4 x float> poison, <16 x i32> <{lanes}>",
            f"  %acc{t}.n = call <16 x float> @llvm.fma.v16f32(<16 x float> %f{t}, <16 x float> %k{t}, "
            f"<16 x float> %acc{t})",
        ]
    else:
        prev = f"%acc{t}"
        for h in range(2):
            lanes = ", ".join(f"i32 {2 * h + j // 4}" for j in range(8))
            out = f"%acc{t}.n" if h else f"%acc{t}.h"
            L += [
                f"  %p{t}_{h} = call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> %cv{n}_{h}, <32 x i8> %xv{r}_{h})",
                f"  %i{t}_{h} = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %p{t}_{h}, <16 x i16> splat (i16 1))",
                f"  %f{t}_{h} = sitofp <8 x i32> %i{t}_{h} to <8 x float>",
                f"  %k{t}_{h} = shufflevector <4 x float> %k4_{t}, <4 x float> poison, <8 x i32> <{lanes}>",
                f"  {out} = call <8 x float> @llvm.fma.v8f32(<8 x float> %f{t}_{h}, <8 x float> %k{t}_{h}, "
                f"<8 x float> {prev})",
            ]
            prev = out
    v = "<4 x float>"
    return [*L, f"  %bacc{t}.n = call {v} @llvm.fma.v4f32({v} %b4_{n}, {v} %xs4_{r}, {v} %bacc{t})"]


def microkernel(NR: int, MR: int, vnni: bool, layout: str | None = None) -> str:
    """``@q6i{w}{_k6}_{NR}x{MR}`` with tiles.py's ABI: pw/sw the packed codes, ps/pb/sg float32 scales and biases per
    group of 16 (or ps/sg the k6 super-block records), px/sx int8 activations, pa/sa each input row's [sx_g for
    every g, then x̂s_g for every g]; ``groups`` counts 64-weight blocks."""
    if layout not in (None, "k6"):
        raise ValueError(f"6-bit codes come from Q6_K, whose records are k6, not {layout}")
    W = 16 if vnni else 8
    pairs = [(n, r) for n in range(NR) for r in range(MR)]
    L = [*_entry(NR, MR, "mul i64 %groups, 16"), "loop:", "  %c = phi i64 [0, %entry], [%cn, %loop]"]
    for n, r in pairs:
        L.append(f"  %acc{n}_{r} = phi <{W} x float> [zeroinitializer, %entry], [%acc{n}_{r}.n, %loop]")
        L.append(f"  %bacc{n}_{r} = phi <4 x float> [zeroinitializer, %entry], [%bacc{n}_{r}.n, %loop]")
    L += ["  %cb = mul i64 %c, 48", "  %g4b = mul i64 %c, 16", "  %xo = mul i64 %c, 64"]
    if layout is not None:  # the row's record c / 4, and this block's four sub-scales: 4·(c mod 4) past its d
        L += ["  %rq = lshr i64 %c, 2", "  %rm = and i64 %c, 3", f"  %ro = mul i64 %rq, {RECORDS[layout][0]}"]
        L += ["  %rj = mul i64 %rm, 4", "  %rj4 = add i64 %rj, 4"]
    for n in range(NR):
        L += _codes(n, W) + _scales(n, layout)
    for r in range(MR):
        L += [f"  %xb{r} = add i64 %xr{r}, %xo", f"  %as{r} = add i64 %ar{r}, %ng4"]
        if W == 16:
            L += _load(f"%xv{r}", f"%xb{r}", 0, "<16 x i32>")
        else:
            L += _load(f"%xv{r}_0", f"%xb{r}", 0, "<32 x i8>") + _load(f"%xv{r}_1", f"%xb{r}", 32, "<32 x i8>")
        L += _load(f"%sx4_{r}", f"%ar{r}", "%g4b", "<4 x float>") + _load(f"%xs4_{r}", f"%as{r}", "%g4b", "<4 x float>")
    for n, r in pairs:
        L += _products(n, r, W)
    L += ["  %cn = add i64 %c, 1", "  %cd = icmp sge i64 %cn, %groups", "  br i1 %cd, label %exit, label %loop"]
    L.append("exit:")
    for n, r in pairs:
        bias, bsum = hsum(f"%bacc{n}_{r}.n", 4, f"b{n}_{r}")
        L += bias + store(f"%acc{n}_{r}.n", bsum, n, r, W)
    L.append("  ret void")
    from .tiles import ABI

    name = f"q6i{'w' if vnni else ''}{'_' + layout if layout else ''}_{NR}x{MR}"
    return f"define void @{name}({ABI}) {{\n" + "\n".join(L) + "\n}\n"
