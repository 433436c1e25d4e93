"""GGUF's 5- and 6-bit codes kept in their own bits (Q5_0, Q5_1, Q5_K; Q6_K), and the integer tiles that read them
packed, in LLVM IR.

Why: the loader repacks those types exactly as 8-bit codes (fs_weights.gguf_blocks), a byte per code, and a decode
step streams every weight once: Q6_K, the lm_head of every Q4_K_M / Q5_K_M file and Qwen3-0.6B's largest matrix,
then reads 1.08 bytes per weight (with its super-block records) where the file has 0.82, and Q5_K 1.09 against 0.69.
Packed, 6-bit codes take 0.75 bytes per weight and 5-bit ones 0.625 - about the file's bytes.

Why integer dot products: unpacking costs instructions, and the float 8-bit tile is already at its arithmetic limit
on these CPUs (a float tile on packed 6-bit codes measured 1.15× slower than a byte per code, fewer bytes or not).
With int8 activations (integer_tiles.py's quantities: ``sx_g = max|x_g| / 127``, ``x̂s_g = sx_g·Σxq_g``, per weight
group) one ``vpdpbusd`` multiplies 64 codes (AVX2: ``vpmaddubsw`` + ``vpmaddwd`` 32; 2·63·127 fits 16 bits), as
llama.cpp multiplies these types by activations quantized to int8 (per 32 or 256; here per weight group).

Layout, per weight row and per block of 64 weights c[0..63] (k a multiple of 64):

    bytes 0..31:  c[j] & 15 | (c[j + 32] & 15) << 4                     the low nibbles, two per byte
    6-bit, 32..47: c[j] >> 4 | (c[j+16] >> 4) << 2 | (c[j+32] >> 4) << 4 | (c[j+48] >> 4) << 6     the top 2 bits
    5-bit, 32..39: bit i of the little-endian 64-bit word is c[i] >> 4                              the top bit

Contract, for weight row i and input row r, per block c in order; its GB = 64/G groups g = c·GB + j are
consecutive int32 lanes (4 weights each: G/4 lanes a group):

    acc  = fma(float(integer sums), [s_g · sx_g, each over its group's lanes], acc)   (AVX2: two halves of 8 lanes)
    bacc = fma(b[g..], x̂s[g..], bacc)                                                (GB lanes: lane j, group c·GB+j)
    out[r, i] = hsum(acc) + hsum(bacc)                       (float_tiles.hsum's tree, on W lanes and on GB)

Every tile shape computes an element by that chain (batch invariant); a K-quant's records (Q6_K: k6, ``s = d·sc``,
``b = -32·s``; Q5_K: k4, ``b = -(m·mn)``) and its expanded float32 scales give the same products, so the same bits.
Packing is a storage decision, made in ``keep_packed`` from the bits the file gives (``Checkpoint.code_bits``), only
where these tiles run (AVX2 + FMA, int8 activations on); elsewhere the codes keep a byte each.
"""

from typing import Any

import numpy as np

from . import half_scales
from .float_tiles import hsum, prefetch, stores
from .integer_tiles import _entry, _load
from .superblock_scales import RECORDS, scales_and_biases

BLOCK = 64  # weights per packed block
GROUP = {5: 32, 6: 16}  # the weight group of each packed width (GGUF's Q5_* and Q6_K)
KINDS = ("q5i", "q5iw", "q6i", "q6iw")  # the tile kinds; a trailing w: AVX-512 VNNI


def block_bytes(bits: int) -> int:
    return BLOCK * bits // 8


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes [n, k] (every one below 2^bits, k % 64 == 0) -> the packed layout, uint8 [n, k / 64 · (8·bits)]."""
    n, k = codes.shape
    if k % BLOCK or (codes.size and int(codes.max()) >> bits):
        raise ValueError(f"{bits}-bit packing needs codes below {1 << bits} and rows of a multiple of {BLOCK} (k {k})")
    c = codes.reshape(n, k // BLOCK, BLOCK)
    low = (c[..., :32] & 15) | ((c[..., 32:] & 15) << 4)
    top = c >> 4
    high: np.ndarray
    if bits == 6:
        high = top[..., :16] | (top[..., 16:32] << 2) | (top[..., 32:48] << 4) | (top[..., 48:] << 6)
    else:
        high = np.packbits(top, axis=-1, bitorder="little")
    return np.concatenate([low, high], axis=2).reshape(n, -1)


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of ``pack``: uint8 [n, k / 64 · (8·bits)] -> uint8 codes [n, k]."""
    n = packed.shape[0]
    b = packed.reshape(n, -1, block_bytes(bits))
    low, high = b[..., :32], b[..., 32:]
    nib = np.concatenate([low & 15, low >> 4], axis=2)
    if bits == 6:
        top = np.concatenate([(high >> s) & 3 for s in (0, 2, 4, 6)], axis=2)
    else:
        top = np.unpackbits(high, axis=-1, bitorder="little")
    return (nib | (top << 4)).reshape(n, -1)


def keep_packed(w: Any, bits: int | None) -> Any:
    """An 8-bit AffineWeight whose codes the file holds in ``bits`` (5 or 6; ``Checkpoint.code_bits``) in those bits,
    where this CPU's tiles run the packed form (``tiles.applies``: AVX2 + FMA, int8 activations, the type's group,
    k % 64 == 0); otherwise as it is."""
    from dataclasses import replace

    from . import tiles

    if bits not in GROUP or w.bits != 8 or w.group_size != GROUP[bits]:
        return w
    if not tiles.applies(f"q{bits}i", w.shape[1], w.group_size):
        return w
    return replace(w, codes=pack(w.codes, bits), bits=bits)


def _codes(n: int, bits: int, W: int) -> list[str]:
    """Weight row n's block at step %c unpacked: 64 codes in order, as %cv{n} (<16 x i32>, VNNI) or as %cv{n}_0 and
    %cv{n}_1 (<32 x i8> each: weights 0-31, 32-63)."""
    L = [f"  %wc{n} = add i64 %wr{n}, %cb", *prefetch(f"%pf{n}", f"%wc{n}")]
    L += _load(f"%lv{n}", f"%wc{n}", 0, "<32 x i8>")
    L += [f"  %l0{n} = and <32 x i8> %lv{n}, splat (i8 15)", f"  %l1{n} = lshr <32 x i8> %lv{n}, splat (i8 4)"]
    every = ", ".join(f"i32 {j}" for j in range(64))
    if bits == 5:  # one bit a weight: the mask selects 16 (the code's bit 4) lane by lane
        L += _load(f"%hw{n}", f"%wc{n}", 32, "i64")
        L += [
            f"  %hk{n} = bitcast i64 %hw{n} to <64 x i1>",
            f"  %hm{n} = select <64 x i1> %hk{n}, <64 x i8> splat (i8 16), <64 x i8> zeroinitializer",
        ]
    else:  # two bits a weight, quarter q at bits 2q of the 16 bytes: shifted to bits 4-5 per quarter
        L += _load(f"%hb{n}", f"%wc{n}", 32, "<16 x i8>")
        half = ", ".join(f"i32 {j}" for j in range(32))
        L += [
            f"  %t0{n} = shl <16 x i8> %hb{n}, splat (i8 4)",
            f"  %t1{n} = shl <16 x i8> %hb{n}, splat (i8 2)",
            f"  %t3{n} = lshr <16 x i8> %hb{n}, splat (i8 2)",
            f"  %h01{n} = shufflevector <16 x i8> %t0{n}, <16 x i8> %t1{n}, <32 x i32> <{half}>",
            f"  %h23{n} = shufflevector <16 x i8> %hb{n}, <16 x i8> %t3{n}, <32 x i32> <{half}>",
            f"  %m01{n} = and <32 x i8> %h01{n}, splat (i8 48)",
            f"  %m23{n} = and <32 x i8> %h23{n}, splat (i8 48)",
            f"  %hm{n} = shufflevector <32 x i8> %m01{n}, <32 x i8> %m23{n}, <64 x i32> <{every}>",
        ]
    L += [
        f"  %low{n} = shufflevector <32 x i8> %l0{n}, <32 x i8> %l1{n}, <64 x i32> <{every}>",
        f"  %cc{n} = or <64 x i8> %low{n}, %hm{n}",
    ]
    if W == 16:
        return [*L, f"  %cv{n} = bitcast <64 x i8> %cc{n} to <16 x i32>"]
    for h in range(2):
        lanes = ", ".join(f"i32 {32 * h + j}" for j in range(32))
        L.append(f"  %cv{n}_{h} = shufflevector <64 x i8> %cc{n}, <64 x i8> poison, <32 x i32> <{lanes}>")
    return L


def _scales(n: int, GB: int, layout: str | None) -> list[str]:
    """Weight row n's GB scales %sv{n} and biases %bv{n} (<GB x float>) of step %c's groups: read as float32 or
    16-bit floats, or made
    from the row's super-block record c / 4 (%ro: its offset; this block's integers at %rj past their start)."""
    v = f"<{GB} x float>"
    if layout is None:
        return _load(f"%sv{n}", f"%sr{n}", "%gb", v) + _load(f"%bv{n}", f"%br{n}", "%gb", v)
    if layout in half_scales.LAYOUTS:  # 16-bit scales and biases of groups c·GB.. (Q5_0 / Q5_1's float16 factors)
        gi = [f"  %gi{n} = mul i64 %c, {GB}"]
        return gi + half_scales.scale_and_bias(f"%sv{n}", f"%bv{n}", f"%sr{n}", f"%br{n}", f"%gi{n}", layout, GB)
    return [f"  %rec{n} = add i64 %sr{n}, %ro", *scales_and_biases(f"%sv{n}", f"%bv{n}", f"%rec{n}", "%rj", layout, GB)]


def _products(n: int, r: int, G: int, W: int) -> list[str]:
    """Weight row n times input row r for step %c, folded into %acc{n}_{r}.n and %bacc{n}_{r}.n."""
    t, GB = f"{n}_{r}", BLOCK // G
    v = f"<{GB} x float>"
    L = [f"  %k{t} = fmul {v} %sv{n}, %sx{r}"]
    if W == 16:
        lanes = ", ".join(f"i32 {4 * j // G}" for j in range(16))
        L += [
            f"  %i{t} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> zeroinitializer, <16 x i32> %cv{n}, "
            f"<16 x i32> %xv{r})",
            f"  %f{t} = sitofp <16 x i32> %i{t} to <16 x float>",
            f"  %kw{t} = shufflevector {v} %k{t}, {v} poison, <16 x i32> <{lanes}>",
            f"  %acc{t}.n = call <16 x float> @llvm.fma.v16f32(<16 x float> %f{t}, <16 x float> %kw{t}, "
            f"<16 x float> %acc{t})",
        ]
    else:
        prev = f"%acc{t}"
        for h in range(2):
            lanes = ", ".join(f"i32 {(32 * h + 4 * j) // G}" for j in range(8))
            out = f"%acc{t}.n" if h else f"%acc{t}.h"
            L += [
                f"  %p{t}_{h} = call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> %cv{n}_{h}, <32 x i8> %xv{r}_{h})",
                f"  %i{t}_{h} = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %p{t}_{h}, <16 x i16> splat (i16 1))",
                f"  %f{t}_{h} = sitofp <8 x i32> %i{t}_{h} to <8 x float>",
                f"  %kw{t}_{h} = shufflevector {v} %k{t}, {v} poison, <8 x i32> <{lanes}>",
                f"  {out} = call <8 x float> @llvm.fma.v8f32(<8 x float> %f{t}_{h}, <8 x float> %kw{t}_{h}, "
                f"<8 x float> {prev})",
            ]
            prev = out
    return [*L, f"  %bacc{t}.n = call {v} @llvm.fma.v{GB}f32({v} %bv{n}, {v} %xs{r}, {v} %bacc{t})"]


def microkernel(NR: int, MR: int, bits: int, vnni: bool, layout: str | None = None) -> str:
    """``@q{bits}i{w}{_layout}_{NR}x{MR}`` with tiles.py's ABI: pw/sw the packed codes, ps/pb/sg float32 scales and
    biases per group (or ps/sg the super-block records: k6 for Q6_K, k4 for Q5_K), px/sx int8 activations, pa/sa
    each input row's [sx_g for every g, then x̂s_g for every g]; ``groups`` counts 64-weight blocks."""
    if layout in RECORDS and layout != {6: "k6", 5: "k4"}[bits]:
        raise ValueError(f"{bits}-bit codes come with {'k6' if bits == 6 else 'k4'} super-block records, not {layout}")
    W, G = (16 if vnni else 8), GROUP[bits]
    GB = BLOCK // G
    pairs = [(n, r) for n in range(NR) for r in range(MR)]
    L = [*_entry(NR, MR, f"mul i64 %groups, {4 * GB}"), "loop:", "  %c = phi i64 [0, %entry], [%cn, %loop]"]
    for n, r in pairs:
        L.append(f"  %acc{n}_{r} = phi <{W} x float> [zeroinitializer, %entry], [%acc{n}_{r}.n, %loop]")
        L.append(f"  %bacc{n}_{r} = phi <{GB} x float> [zeroinitializer, %entry], [%bacc{n}_{r}.n, %loop]")
    L += [f"  %cb = mul i64 %c, {block_bytes(bits)}", f"  %gb = mul i64 %c, {4 * GB}", "  %xo = mul i64 %c, 64"]
    if layout in RECORDS:  # record c / 4 of a row (4 blocks a super-block), and this block's GB integers in it
        L += ["  %rq = lshr i64 %c, 2", "  %rm = and i64 %c, 3", f"  %ro = mul i64 %rq, {RECORDS[layout][0]}"]
        L += [f"  %rj = mul i64 %rm, {GB}"]
    for n in range(NR):
        L += _codes(n, bits, W) + _scales(n, GB, layout)
    for r in range(MR):
        L += [f"  %xb{r} = add i64 %xr{r}, %xo", f"  %as{r} = add i64 %ar{r}, %ng4"]
        if W == 16:
            L += _load(f"%xv{r}", f"%xb{r}", 0, "<16 x i32>")
        else:
            L += _load(f"%xv{r}_0", f"%xb{r}", 0, "<32 x i8>") + _load(f"%xv{r}_1", f"%xb{r}", 32, "<32 x i8>")
        v = f"<{GB} x float>"
        L += _load(f"%sx{r}", f"%ar{r}", "%gb", v) + _load(f"%xs{r}", f"%as{r}", "%gb", v)
    for n, r in pairs:
        L += _products(n, r, G, W)
    L += ["  %cn = add i64 %c, 1", "  %cd = icmp sge i64 %cn, %groups", "  br i1 %cd, label %exit, label %loop"]
    L.append("exit:")
    bsums = {}
    for n, r in pairs:
        bias, bsums[n, r] = hsum(f"%bacc{n}_{r}.n", GB, f"b{n}_{r}")
        L += bias
    L += stores({(n, r): f"%acc{n}_{r}.n" for n, r in pairs}, bsums, NR, MR, W)
    L.append("  ret void")
    from .tiles import ABI

    name = f"q{bits}i{'w' if vnni else ''}{'_' + layout if layout else ''}_{NR}x{MR}"
    return f"define void @{name}({ABI}) {{\n" + "\n".join(L) + "\n}\n"
