"""Integer dot products for 4-bit decode on CPUs with AVX-512 VNNI, written in LLVM IR (numba's llvmlite).

The float kernel in quantized.py spends three instructions per 4-bit weight (widen, convert, multiply-add) and is
compute-bound at ~20 GB/s. ``vpdpbusd`` multiplies 64 unsigned bytes by 64 signed bytes and adds them in groups of
four into 16 int32 lanes: one instruction per 64 weights. numba does not emit it from Python loops, so the row
kernel below is LLVM IR calling the intrinsic, compiled once at import and called from a numba loop.

Contract (what llama.cpp does for Q4_0): the activations of a decode step are quantized per group of 64 to int8, ``x ≈
sx_g · xq``, ``sx_g = max|x_g| / 127``. With weights ``w = s·q + b`` a row's dot product is ``Σ_g s_g·sx_g·(q_g · xq_g)
+ b_g·sx_g·Σ xq_g`` — the bias term sums the rounded activations too (integer_tiles.py says why). Each integer dot is
exact; the only new error is the activation rounding (≤ sx_g/2 per element). Measured on the 0.6B shapes: 4-bit decode
+16 %; for 8-bit codes the float kernel already streams at the memory limit and the integer path was not faster (while
tripling the logit error on the demo model), so 8-bit keeps float activations. Used for group 64 with an even number of
groups (the planar pairs); prefill keeps float activations (dequantize + BLAS).
``FS_INT8_ACTIVATIONS=0`` turns it off (cpu/__init__.py).
"""

import ctypes
from typing import Any

import numpy as np

from . import SWITCHES
from .integer_tiles import GROUP, quantize_rows, scales_and_sums
from .llvm_ir import ADDRESSES, compile_ir
from .threads import bucket, fan_out


def _lanes(value: int) -> str:
    return "<" + ", ".join(f"i8 {value}" for _ in range(64)) + ">"


# Arguments are addresses (i64): row codes, xq (int8), row scales, sx; then the chunk count. A chunk is 64 code bytes,
# two groups of the planar 4-bit layout (low nibbles: group 2c, high nibbles: group 2c+1).
_IR = f"""
declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)
declare float @llvm.vector.reduce.fadd.v16f32(float, <16 x float>)

define internal <16 x float> @scaled(<64 x i8> %q, float* %w, float* %s, i64 %g, i8* %xq, <16 x float> %acc) {{
  %px = getelementptr i8, i8* %xq, i64 %g
  %pxv = bitcast i8* %px to <64 x i8>*
  %x = load <64 x i8>, <64 x i8>* %pxv, align 1
  %q32 = bitcast <64 x i8> %q to <16 x i32>
  %x32 = bitcast <64 x i8> %x to <16 x i32>
  %d = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> zeroinitializer, <16 x i32> %q32, <16 x i32> %x32)
  %f = sitofp <16 x i32> %d to <16 x float>
  %gi = udiv i64 %g, {GROUP}
  %pw = getelementptr float, float* %w, i64 %gi
  %ps = getelementptr float, float* %s, i64 %gi
  %wv = load float, float* %pw
  %sv = load float, float* %ps
  %k = fmul float %wv, %sv
  %k0 = insertelement <16 x float> undef, float %k, i32 0
  %kk = shufflevector <16 x float> %k0, <16 x float> undef, <16 x i32> zeroinitializer
  %m = fmul <16 x float> %f, %kk
  %r = fadd <16 x float> %acc, %m
  ret <16 x float> %r
}}

define float @row_q4(i64 %pc, i64 %px, i64 %pw, i64 %ps, i64 %n) {{
entry:
  %c = inttoptr i64 %pc to <64 x i8>*
  %xq = inttoptr i64 %px to i8*
  %w = inttoptr i64 %pw to float*
  %s = inttoptr i64 %ps to float*
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %acc = phi <16 x float> [zeroinitializer, %entry], [%acc2, %loop]
  %pq = getelementptr <64 x i8>, <64 x i8>* %c, i64 %i
  %v = load <64 x i8>, <64 x i8>* %pq, align 1
  %lo = and <64 x i8> %v, {_lanes(15)}
  %hi = lshr <64 x i8> %v, {_lanes(4)}
  %g0 = mul i64 %i, {2 * GROUP}
  %g1 = add i64 %g0, {GROUP}
  %acc1 = call <16 x float> @scaled(<64 x i8> %lo, float* %w, float* %s, i64 %g0, i8* %xq, <16 x float> %acc)
  %acc2 = call <16 x float> @scaled(<64 x i8> %hi, float* %w, float* %s, i64 %g1, i8* %xq, <16 x float> %acc1)
  %next = add i64 %i, 1
  %done = icmp sge i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  %r = call reassoc float @llvm.vector.reduce.fadd.v16f32(float 0.0, <16 x float> %acc2)
  ret float %r
}}
"""


_fns = compile_ir(
    _IR, ("avx512f", "avx512bw", "avx512vnni"), {"row_q4": ctypes.CFUNCTYPE(ctypes.c_float, *[ADDRESSES] * 5)}
)
_row_q4: Any = (_fns or {}).get("row_q4")
AVAILABLE = _row_q4 is not None  # this CPU and install can run it; SWITCHES.int8_activations says whether it may

if AVAILABLE:
    from numba import njit, prange

    @njit(parallel=True, fastmath=True, cache=True)
    def _rows_vnni(row_q4, q, scales, biases, XQ, SX, XS, out):  # pragma: no cover - compiled
        """out[r, i] = the contract's dot product of row i with activation row r; one pass over the codes.
        ``row_q4`` comes in as an argument so that this function can go to numba's disk cache."""
        n, ng = scales.shape
        chunks = ng // 2
        base, stride = q.ctypes.data, q.strides[0]
        wbase, wstride = scales.ctypes.data, scales.strides[0]
        for blk in prange((n + 15) // 16):
            for i in range(blk * 16, min(n, blk * 16 + 16)):
                b = biases[i]
                for r in range(XQ.shape[0]):
                    args = (base + i * stride, XQ[r].ctypes.data, wbase + i * wstride, SX[r].ctypes.data, chunks)
                    acc = row_q4(*args)
                    xs = XS[r]
                    for g in range(ng):
                        acc += b[g] * xs[g]
                    out[r, i] = acc


def applies(bits: int, group: int, in_features: int) -> bool:
    """The integer path covers 4-bit codes, group 64, an even number of groups (the planar pairs)."""
    return AVAILABLE and SWITCHES.int8_activations and bits == 4 and group == GROUP and in_features % (2 * GROUP) == 0


def rows(w, x: np.ndarray) -> np.ndarray:
    """``x [m, in] · wᵀ`` for an AffineWeight ``w`` on the integer path (call ``applies`` first)."""
    xq, side = quantize_rows(x)
    sx, xs = (np.ascontiguousarray(a) for a in scales_and_sums(side))
    out = np.empty((x.shape[0], w.shape[0]), np.float32)
    key = ("vnni", w.shape, bucket(x.shape[0]))
    fan_out(key, _rows_vnni, _row_q4, w.codes, w.scales, w.biases, xq, sx, xs, out)
    return out
