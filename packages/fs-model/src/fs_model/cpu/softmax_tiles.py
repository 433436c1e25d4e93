"""The softmax's arithmetic in LLVM IR, and the exponential SwiGLU shares: exp_poly, the weights exp(s - m) of a
row of scores, and a row's max and sum in one written-down order (attention.py calls them through
attention_calls.kernels; silu_tiles.py builds on exp_poly).

Why IR: a fast-math reduction or exponential in numba is compiled anew inside every function that inlines it, and
may come out vectorized another way there - a bit of difference between a direct call and the compiled block's
(compiled_block.py). Hand-written IR is one machine code for every caller.

    exp_shifted(s, n, m, p)    # p[t] = exp_poly(s[t] - m), t < n     (W-padded stores)
    row_max(x, n, out)         # *out = max(x[:n])                     (exact: any order gives it)
    row_sum(x, n, out)         # *out = Σ x[:n]: W lanes, the tiles' tree, then the tail in order

exp_poly is Cephes' single-precision exponential (x = n·ln2 + r, a degree-7 polynomial in r, times 2ⁿ; within 2 ulp
of exp), 0 below -87.3 (where exp's result would be subnormal), every argument an i64 as the attention tiles take them.
"""

from .attention_tiles import _f, _fma, _ptr, _splat_bits, _vec
from .float_tiles import _splat

LOG2E, LN2_HI, LN2_LO = 1.44269504088896341, 0.693359375, -2.12194440e-4
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
EXP_FLOOR = -87.3  # below: 0 (exp would be subnormal; 2ⁿ below is built for n >= -126)
EXP_CEILING = 88.0  # s - m <= 0 in a softmax; the clamp keeps a padding lane's garbage from overflowing 2ⁿ


def exp_poly(W: int, x0: str, out: str) -> list[str]:
    """IR lines making ``out`` = exp_poly(``x0``) lane by lane (the module docstring's contract: within 2 ulp of exp,
    0 below EXP_FLOOR); an input above EXP_CEILING is clamped there. Names made: ``out`` with suffixes."""
    v, iv = _vec(W), f"<{W} x i32>"
    L = [
        f"  {out}.xc = call {v} @llvm.maxnum.v{W}f32({v} {x0}, {v} splat (float {_f(EXP_FLOOR)}))",
        f"  {out}.x = call {v} @llvm.minnum.v{W}f32({v} {out}.xc, {v} splat (float {_f(EXP_CEILING)}))",
        f"  {out}.fx0 = call {v} {_fma(W)}({v} {out}.x, {v} splat (float {_f(LOG2E)}), {v} splat (float {_f(0.5)}))",
        f"  {out}.fx = call {v} @llvm.floor.v{W}f32({v} {out}.fx0)",
        f"  {out}.r0 = call {v} {_fma(W)}({v} {out}.fx, {v} splat (float {_f(-LN2_HI)}), {v} {out}.x)",
        f"  {out}.r = call {v} {_fma(W)}({v} {out}.fx, {v} splat (float {_f(-LN2_LO)}), {v} {out}.r0)",
        f"  {out}.rr = fmul {v} {out}.r, {out}.r",
    ]
    y = f"splat (float {_f(EXP_POLY[0])})"
    for i, c in enumerate(EXP_POLY[1:]):
        L.append(f"  {out}.y{i} = call {v} {_fma(W)}({v} {y}, {v} {out}.r, {v} splat (float {_f(c)}))")
        y = f"{out}.y{i}"
    return [
        *L,
        f"  {out}.z0 = call {v} {_fma(W)}({v} {y}, {v} {out}.rr, {v} {out}.r)",
        f"  {out}.z = fadd {v} {out}.z0, splat (float {_f(1.0)})",
        f"  {out}.ni = fptosi {v} {out}.fx to {iv}",
        f"  {out}.nb = add {iv} {out}.ni, splat (i32 127)",
        f"  {out}.ns = shl {iv} {out}.nb, splat (i32 23)",
        f"  {out}.two = bitcast {iv} {out}.ns to {v}",
        f"  {out}.e = fmul {v} {out}.z, {out}.two",
        f"  {out}.under = fcmp olt {v} {x0}, splat (float {_f(EXP_FLOOR)})",
        f"  {out} = select <{W} x i1> {out}.under, {v} zeroinitializer, {v} {out}.e",
    ]


def exp_shifted(W: int) -> str:
    """``@exp_shifted``: p[t] = exp_poly(s[t] - m) for t < n, W lanes a step (the last step's extra lanes are
    computed from, and stored into, the rows' padding)."""
    v = _vec(W)
    L = ["define void @exp_shifted(i64 %s, i64 %n, i64 %mb, i64 %p) {", "entry:", *_splat_bits("%m", "%mb", W)]
    L += ["  br label %loop", "loop:", "  %t = phi i64 [0, %entry], [%tn, %loop]", "  %off = mul i64 %t, 4"]
    L += ["  %sa = add i64 %s, %off", *_ptr("%sp", "%sa"), f"  %sv = load {v}, ptr %sp, align 4"]
    L += [f"  %x0 = fsub {v} %sv, %m", *exp_poly(W, "%x0", "%ev")]
    L += [
        "  %pa = add i64 %p, %off",
        *_ptr("%pp", "%pa"),
        f"  store {v} %ev, ptr %pp, align 4",
        *loop_end(W),
    ]
    return "\n".join(L) + "\n"


def _combine(op: str, a: str, b: str, ty: str, out: str) -> list[str]:
    """``out`` = a + b, or the larger of a and b (exact, so a max's order cannot matter), in type ``ty``."""
    if op == "sum":
        return [f"  {out} = fadd {ty} {a}, {b}"]
    mask = f"<{ty.split()[0][1:]} x i1>" if ty.startswith("<") else "i1"
    return [f"  {out}.gt = fcmp ogt {ty} {a}, {b}", f"  {out} = select {mask} {out}.gt, {ty} {a}, {ty} {b}"]


def row_reduce(W: int, op: str) -> str:
    """``@row_{op}(x, n, out)``: *out = the sum or the max of the n floats at x, in one written-down order: W lanes
    (lane l takes x[l], x[W + l], ... over the whole vectors), the lanes by the tiles' tree (halves, lane by lane:
    ``float_tiles.hsum``'s order), then the tail's floats one by one. The same code for every caller: a softmax's
    max and its sum of weights (attention.py) without a compiler left free to reorder them."""
    v = _vec(W)
    L = [f"define void @row_{op}(i64 %x, i64 %n, i64 %out) {{", "entry:", *_ptr("%x0", "%x")]
    init = "zeroinitializer" if op == "sum" else "%first.v"
    if op == "max":
        L += ["  %first = load float, ptr %x0, align 4", *_splat("%first.v", "%first", W)]
    L += ["  br label %vcheck", "vcheck:", "  %t = phi i64 [0, %entry], [%tn, %vloop]"]
    L += [f"  %acc = phi {v} [{init}, %entry], [%accn, %vloop]", f"  %tn = add i64 %t, {W}"]
    L += ["  %fits = icmp sle i64 %tn, %n", "  br i1 %fits, label %vloop, label %reduce", "vloop:"]
    L += ["  %off = mul i64 %t, 4", "  %xa = add i64 %x, %off", *_ptr("%xp", "%xa")]
    L += [f"  %xv = load {v}, ptr %xp, align 4", *_combine(op, "%acc", "%xv", v, "%accn"), "  br label %vcheck"]
    L += ["reduce:"]
    acc, w = "%acc", W
    while w > 1:
        h = w // 2
        lo, hi = ", ".join(f"i32 {i}" for i in range(h)), ", ".join(f"i32 {i}" for i in range(h, w))
        vt = f"<{w} x float>"
        if h == 1:
            L += [f"  %r{w}l = extractelement {vt} {acc}, i32 0", f"  %r{w}h = extractelement {vt} {acc}, i32 1"]
            L += _combine(op, f"%r{w}l", f"%r{w}h", "float", f"%r{w}")
        else:
            L += [f"  %r{w}l = shufflevector {vt} {acc}, {vt} poison, <{h} x i32> <{lo}>",
                  f"  %r{w}h = shufflevector {vt} {acc}, {vt} poison, <{h} x i32> <{hi}>"]  # fmt: skip
            L += _combine(op, f"%r{w}l", f"%r{w}h", f"<{h} x float>", f"%r{w}")
        acc, w = f"%r{w}", h
    L += ["  br label %scheck", "scheck:", "  %u = phi i64 [%t, %reduce], [%un, %sloop]"]
    L += [f"  %r = phi float [{acc}, %reduce], [%rn, %sloop]", "  %more = icmp slt i64 %u, %n"]
    L += ["  br i1 %more, label %sloop, label %done", "sloop:", "  %uo = mul i64 %u, 4", "  %ua = add i64 %x, %uo"]
    L += [*_ptr("%up", "%ua"), "  %uv = load float, ptr %up, align 4", *_combine(op, "%r", "%uv", "float", "%rn")]
    L += ["  %un = add i64 %u, 1", "  br label %scheck", "done:", *_ptr("%op", "%out")]
    L += ["  store float %r, ptr %op, align 4", "  ret void", "}"]
    return "\n".join(L) + "\n"


def loop_end(W: int) -> list[str]:
    """The end of a function whose one loop steps %t by W lanes until %n (its phi names %tn), then returns."""
    return [f"  %tn = add i64 %t, {W}", "  %more = icmp slt i64 %tn, %n", "  br i1 %more, label %loop, label %exit",
            "exit:", "  ret void", "}"]  # fmt: skip
