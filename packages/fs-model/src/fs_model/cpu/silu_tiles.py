"""SwiGLU's middle step, silu(g) · u, as a vector kernel in LLVM IR, with attention's exponential.

Why: the step between gate | up and down is one exponential per element of the MLP's width (3,072 per token at
Qwen3-0.6B's shapes). numpy's is vectorized but costs three calls a layer; a compiled numba loop calls libm's scalar
expf (a 128-token prefill: 2-4 ms a layer, 10 % of an int4 prefill), and a fast-math one is free to vectorize it
differently in each function that inlines it - the compiled block (compiled_block.py) and the Python path must give
the same bits. Hand-written IR is the same machine code for every caller: one vector chain per W lanes,

    out[j] = g[j] / (1 + exp_poly(-g[j])) · u[j]        j < n, n a multiple of W

where exp_poly is softmax_tiles' (Cephes' polynomial, within 2 ulp of exp; 0 below -87.3) and an argument above
88 gives +inf, so a very negative g gives -0.0 as numpy's silu does.

    silu_mul(g, u) -> out             # g, u [..., I] float32: the kernel row by row, or the loop where it is 0
    fn = kernel(I)                    # the code address for rows of width I, or 0
"""

import ctypes

import numpy as np

from . import HAVE_NUMBA
from .attention_calls import lanes
from .attention_tiles import DECLARATIONS, _f, _ptr, _vec
from .llvm_ir import compile_ir
from .softmax_tiles import EXP_CEILING, exp_poly, loop_end

_compiled: dict[int, int] = {}


def ir(W: int) -> str:
    """``@silu_mul(g, u, out, n)``: every i64 an address or the count n (a multiple of W)."""
    v = _vec(W)
    L = ["define void @silu_mul(i64 %g, i64 %u, i64 %o, i64 %n) {", "entry:", "  br label %loop", "loop:"]
    L += ["  %t = phi i64 [0, %entry], [%tn, %loop]", "  %off = mul i64 %t, 4"]
    for name, base in (("%gp", "%g"), ("%up", "%u"), ("%op", "%o")):
        L += [f"  {name}.a = add i64 {base}, %off", *_ptr(name, f"{name}.a")]
    L += [f"  %gv = load {v}, ptr %gp, align 4", f"  %uv = load {v}, ptr %up, align 4"]
    L += [f"  %x0 = fneg {v} %gv", *exp_poly(W, "%x0", "%e0")]
    L += [
        f"  %over = fcmp ogt {v} %x0, splat (float {_f(EXP_CEILING)})",
        f"  %e = select <{W} x i1> %over, {v} splat (float 0x7FF0000000000000), {v} %e0",
        f"  %d = fadd {v} %e, splat (float {_f(1.0)})",
        f"  %s = fdiv {v} %gv, %d",
        f"  %r = fmul {v} %s, %uv",
        f"  store {v} %r, ptr %op, align 4",
        *loop_end(W),
    ]
    return DECLARATIONS + "\n".join(L) + "\n"


def kernel(I: int) -> int:
    """The address of ``@silu_mul`` for rows of I values (compiled once per width W), or 0 where the IR does not
    apply: no AVX2 + FMA, ``FS_TILES=0``, or I not a multiple of W. Decided here, once per MLP width, for every path."""
    W = lanes(I)
    if not W or I % W:
        return 0
    if W not in _compiled:
        features = ("avx512f", "avx512bw") if W == 16 else ("avx2", "fma")
        sig = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 4)
        fns = compile_ir(ir(W), features, {"silu_mul": sig})
        _compiled[W] = ctypes.cast(fns["silu_mul"], ctypes.c_void_p).value or 0 if fns is not None else 0
    return _compiled[W]


if HAVE_NUMBA:
    from numba import njit, prange

    from .llvm_ir import call_address
    from .threads import PARALLEL_FLOATS, both

    def _silu_impl(fn, g, u, out):  # pragma: no cover - compiled
        m, I = out.shape
        if fn != 0:
            i64 = np.int64
            pg, pu, po = i64(g.ctypes.data), i64(u.ctypes.data), i64(out.ctypes.data)
            for r in prange(m):
                call_address(fn, (pg + r * g.strides[0], pu + r * u.strides[0], po + r * out.strides[0], i64(I)))  # type: ignore[call-arg]
            return
        one = np.float32(1.0)
        for r in prange(m):
            for j in range(I):
                out[r, j] = g[r, j] / (one + np.exp(-g[r, j])) * u[r, j]

    _silu_serial, _silu_parallel = both(_silu_impl)

    @njit(cache=True)
    def _silu_mul(fn, g, u, out):  # pragma: no cover - compiled
        """out = silu(g) · u row by row ([m, I], each row contiguous): ``@silu_mul`` at fn, or where fn is 0 mlp.py's
        float32 operations one element at a time (no fastmath: the same bits in any caller); over the pool from
        PARALLEL_FLOATS floats."""
        if out.size >= PARALLEL_FLOATS:
            _silu_parallel(fn, g, u, out)
        else:
            _silu_serial(fn, g, u, out)


def silu_mul(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """silu(g) · u for g, u [..., I] float32 in one compiled call (numpy's takes three: ~14 µs a decode layer)."""
    I = g.shape[-1]
    g2, u2 = (np.ascontiguousarray(a.reshape(-1, I)) if a.strides[-1] != 4 else a.reshape(-1, I) for a in (g, u))
    out = np.empty(g2.shape, np.float32)
    _silu_mul(kernel(I), g2, u2, out)
    return out.reshape(g.shape)
