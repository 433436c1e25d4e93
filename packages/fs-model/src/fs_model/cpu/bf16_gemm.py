"""Prefill with bf16 weights as a bf16 GEMM: AVX512-BF16 ``vdpbf16ps`` in a 4×4 register tile (LLVM IR).

Prefill is compute-bound. numpy's OpenBLAS has no bf16 GEMM (it is built without ``sbgemm``), so the fallback
widens each matrix to float32 and runs sgemm at ~200 GFLOP/s on this machine's two cores. ``vdpbf16ps`` multiplies
32 bf16 pairs per instruction into 16 float32 sums — twice the f32 FMA rate — and a plain 4×4 tile (four weight rows
× four prompt rows, sixteen accumulators, k in steps of 32) measured 300-325 GFLOP/s on the 0.6B shapes.

Contract: ``y = bf16(x) · wᵀ`` with float32 accumulation — the prompt's activations are rounded to bf16 (round to
nearest even) at each product, as mlx-lm's bf16 models and llama.cpp's BF16 path compute; decode steps (≤ 8 rows)
keep float32 activations (kernels.py). Needs n % 4 == 0 and k % 32 == 0 (every Qwen3 matrix); otherwise, or on a
CPU without avx512_bf16, the widen-and-BLAS path runs. ``FS_BF16_GEMM=0`` turns it off (cpu/__init__.py).
"""

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from . import SWITCHES
from .llvm_ir import ADDRESSES, compile_ir
from .threads import bucket, fan_out

R = C = 4  # weight rows × prompt rows per tile


def _tile_ir() -> str:
    """``tile(w, w_stride, x, x_stride, k, out, out_stride)``: out[r][i] = Σ_j x[r][j]·w[i][j] for a 4×4 tile."""
    acc = [(i, r) for i in range(R) for r in range(C)]
    L = [
        "declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)",
        "declare float @llvm.vector.reduce.fadd.v16f32(float, <16 x float>)",
        "define void @tile(i64 %pw, i64 %sw, i64 %px, i64 %sx, i64 %k, i64 %po, i64 %so) {",
        "entry:",
        "  %w = inttoptr i64 %pw to bfloat*",
        "  %x = inttoptr i64 %px to bfloat*",
        "  %o = inttoptr i64 %po to float*",
        "  br label %loop",
        "loop:",
        "  %j = phi i64 [0, %entry], [%jn, %loop]",
    ]
    L += [f"  %a{i}_{r} = phi <16 x float> [zeroinitializer, %entry], [%n{i}_{r}, %loop]" for i, r in acc]
    for name, base, stride, count in (("w", "%w", "%sw", R), ("x", "%x", "%sx", C)):
        for i in range(count):
            L += [
                f"  %{name}o{i} = mul i64 {stride}, {i}",
                f"  %{name}i{i} = add i64 %{name}o{i}, %j",
                f"  %{name}p{i} = getelementptr bfloat, bfloat* {base}, i64 %{name}i{i}",
                f"  %{name}q{i} = bitcast bfloat* %{name}p{i} to <32 x bfloat>*",
                f"  %{name}v{i} = load <32 x bfloat>, <32 x bfloat>* %{name}q{i}, align 2",
            ]
    L += [
        f"  %n{i}_{r} = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512("
        f"<16 x float> %a{i}_{r}, <32 x bfloat> %wv{i}, <32 x bfloat> %xv{r})"
        for i, r in acc
    ]
    L += [
        "  %jn = add i64 %j, 32",
        "  %done = icmp sge i64 %jn, %k",
        "  br i1 %done, label %exit, label %loop",
        "exit:",
    ]
    for i, r in acc:
        L += [
            f"  %s{i}_{r} = call reassoc float @llvm.vector.reduce.fadd.v16f32(float 0.0, <16 x float> %n{i}_{r})",
            f"  %oo{i}_{r} = mul i64 %so, {r}",
            f"  %oi{i}_{r} = add i64 %oo{i}_{r}, {i}",
            f"  %op{i}_{r} = getelementptr float, float* %o, i64 %oi{i}_{r}",
            f"  store float %s{i}_{r}, float* %op{i}_{r}",
        ]
    return "\n".join([*L, "  ret void", "}"])


_fns = compile_ir(_tile_ir(), ("avx512f", "avx512bf16"), {"tile": ctypes.CFUNCTYPE(None, *[ADDRESSES] * 7)})
AVAILABLE = _fns is not None  # this CPU and install can run it; SWITCHES.bf16_gemm says whether it may

if AVAILABLE:
    from numba import njit, prange

    _tile = (_fns or {})["tile"]

    @njit(parallel=True, cache=True)
    def round_rows(x, out):  # pragma: no cover - compiled
        """out = bf16 bits of x, round to nearest even (rows past len(x) stay as allocated: padding)."""
        for r in prange(x.shape[0]):
            u = x[r].view(np.uint32)
            o = out[r]
            for j in range(u.shape[0]):
                v = u[j]
                o[j] = np.uint16((v + np.uint32(0x7FFF) + ((v >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))

    @njit(parallel=True, cache=True)
    def _gemm_with(tile, w, xb, out):  # pragma: no cover - compiled
        """out [m4, n] = xb [m4, k] · w [n, k]ᵀ, both bf16 bits; n and m4 multiples of 4, k of 32. ``tile`` comes
        in as an argument: a compiled function may not hold a raw code address and still go to numba's disk cache."""
        n, k = w.shape
        m4 = xb.shape[0]
        pw, px, po = w.ctypes.data, xb.ctypes.data, out.ctypes.data
        sw, sx = w.strides[0] // 2, xb.strides[0] // 2
        for ib in prange(n // 4):
            i = ib * 4
            for r in range(0, m4, 4):
                tile(pw + i * sw * 2, sw, px + r * sx * 2, sx, k, po + (r * n + i) * 4, n)


def applies(w: Any) -> bool:
    """bf16 weights (uint16 bits) and 4-bit codes (dequantized to bf16 a chunk at a time) of a tileable shape."""
    n, k = w.shape
    if not (AVAILABLE and SWITCHES.bf16_gemm and n % R == 0 and k % 32 == 0):
        return False
    if isinstance(w, np.ndarray):
        return w.dtype == np.uint16 and w.strides[1] == 2
    return getattr(w, "bits", None) == 4  # 8-bit codes keep float32 products: bf16 would round away their precision


def prepare(x: np.ndarray) -> np.ndarray:
    """The prompt rows as bf16 bits, padded with zero rows to a multiple of 4."""
    m, k = x.shape
    xb = np.zeros((-(-m // C) * C, k), np.uint16)
    round_rows(np.ascontiguousarray(x, dtype=np.float32), xb)
    return xb


def matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``bf16(x [m, k]) @ w [n, k]ᵀ`` -> float32 [m, n] for bf16 bits ``w`` (call ``applies(w)`` first)."""
    xb = prepare(x)
    out = np.empty((xb.shape[0], w.shape[0]), np.float32)
    fan_out(("gemm", w.shape, bucket(xb.shape[0])), _gemm_with, _tile, w, xb, out)
    return out[: x.shape[0]]


def blocked(x: np.ndarray, n: int, k: int, fill: Callable[[int, np.ndarray], None], rows: int = 4096) -> np.ndarray:
    """The same product for weights that ``fill(a, buf)`` expands into bf16 bits, ``rows`` at a time."""
    xb = prepare(x)
    out = np.empty((xb.shape[0], n), np.float32)
    buf = np.empty((min(rows, n), k), np.uint16)
    for a in range(0, n, rows):
        part = buf[: min(rows, n - a)]
        fill(a, part)
        y = np.empty((xb.shape[0], part.shape[0]), np.float32)
        fan_out(("gemm", part.shape, bucket(xb.shape[0])), _gemm_with, _tile, part, xb, y)
        out[:, a : a + part.shape[0]] = y
    return out[: x.shape[0]]
