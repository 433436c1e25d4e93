"""Attention's arithmetic as register tiles, in LLVM IR: the scores of a block of keys, the softmax weights, and
the weighted sum of values, for the query heads of one KV head together (attention.py walks the cache and calls
them).

Why: written as numba loops (until 2026-12-06), a query's score against a key was a dot product over the head's D
values ending in a horizontal sum of one vector - per key and per query head - and every exp was a scalar libm
call; the kernel ran at 12-17 GFLOP/s a thread, 5x slower than reading the cache. Here a group of NK keys' products
stay in NK vector accumulators and one transposing tree adds them all (about 3 instructions a key instead of 8), the
query heads sharing a KV head (GQA) read each key row once, the exponentials are a vector polynomial, and the weighted
sum keeps a query's D accumulators in registers across the keys.

    scores_R(q, qs, k, ks, n, s, ss, scale)   # s[r, t] = scale · (q[r] · k[t]), r < R, t < n  (NK-padded stores)
    weighted_R(p, ps, v, vs, n, o, os)        # o[r, :C·W] += Σ_t p[r, t] · v[t, :C·W]         (C chunks of W lanes)
    exp_shifted(s, n, m, p)                   # p[t] = exp(s[t] - m), t < n                   (W-padded stores)

every argument an i64: addresses (float32 rows), byte strides, counts, and the scale / max as float32 bits.

Contract (what makes the kernel batch invariant, as the matrix tiles are): a key's score is the same chain
whichever group of keys, block or call it comes in - the D products added chunk by chunk (C = D / W vectors of W
lanes, a multiply then fused multiply-adds in chunk order), then the W lanes by the tiles' tree (``float_tiles.hsum``:
halves, lane by lane, down to one), then times the scale; the transposing tree performs exactly that tree for every
key of a group, whichever its slot. A weight is ``exp_poly(s - m)`` lane by lane. An output lane is one FMA chain over
the keys in increasing order (``fma(p_t, v_t, acc)``, starting from 0), wherever calls split the keys. exp_poly is
Cephes' single-precision exponential (x = n·ln2 + r, a degree-7 polynomial in r, times 2ⁿ; within 2 ulp of exp), 0
below -87.3 (where exp's result would be subnormal: at most 1.2e-38 against the softmax's max weight of 1).
"""

import struct

from .float_tiles import _splat

LOG2E, LN2_HI, LN2_LO = 1.44269504088896341, 0.693359375, -2.12194440e-4
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
EXP_FLOOR = -87.3  # below: 0 (exp would be subnormal; 2ⁿ below is built for n >= -126)
EXP_CEILING = 88.0  # s - m <= 0 in a softmax; the clamp keeps a padding lane's garbage from overflowing 2ⁿ

DECLARATIONS = """declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
declare <8 x float> @llvm.floor.v8f32(<8 x float>)
declare <16 x float> @llvm.floor.v16f32(<16 x float>)
declare <8 x float> @llvm.maxnum.v8f32(<8 x float>, <8 x float>)
declare <16 x float> @llvm.maxnum.v16f32(<16 x float>, <16 x float>)
declare <8 x float> @llvm.minnum.v8f32(<8 x float>, <8 x float>)
declare <16 x float> @llvm.minnum.v16f32(<16 x float>, <16 x float>)
"""


def _f(x: float) -> str:
    """A float32 constant as LLVM writes it (the double's bits of the float32 value)."""
    as_float32 = struct.unpack("<f", struct.pack("<f", x))[0]
    return f"0x{struct.unpack('<Q', struct.pack('<d', as_float32))[0]:016X}"


def _vec(W: int) -> str:
    return f"<{W} x float>"


def _fma(W: int) -> str:
    return f"@llvm.fma.v{W}f32"


def _ptr(name: str, address: str) -> list[str]:
    return [f"  {name} = inttoptr i64 {address} to ptr"]


def _splat_bits(name: str, bits: str, W: int) -> list[str]:
    """%name = the float32 whose bits are the low 32 of i64 ``bits``, in every lane."""
    return [f"  {name}.i = trunc i64 {bits} to i32", f"  {name}.f = bitcast i32 {name}.i to float",
            *_splat(name, f"{name}.f", W)]  # fmt: skip


def _suffix(kv: str) -> str:
    return "" if kv == "f32" else "_" + kv


def _chunk(name: str, row: str, c: int, W: int, kv: str) -> list[str]:
    """%name = lanes c·W .. c·W+W-1 of a key or value row at address ``row`` as floats: float32 as it is, bf16 bits
    widened (shifted into a float32's high half: exact, the values a widened copy would hold)."""
    if kv == "f32":
        return [f"  {name}.a = add i64 {row}, {4 * W * c}", *_ptr(f"{name}.p", f"{name}.a"),
                f"  {name} = load {_vec(W)}, ptr {name}.p, align 4"]  # fmt: skip
    return [
        f"  {name}.a = add i64 {row}, {2 * W * c}",
        *_ptr(f"{name}.p", f"{name}.a"),
        f"  {name}.h = load <{W} x i16>, ptr {name}.p, align 2",
        f"  {name}.z = zext <{W} x i16> {name}.h to <{W} x i32>",
        f"  {name}.s = shl <{W} x i32> {name}.z, splat (i32 16)",
        f"  {name} = bitcast <{W} x i32> {name}.s to {_vec(W)}",
    ]


def _lanes(idx: list[int]) -> str:
    return ", ".join(f"i32 {x}" for x in idx)


def transposed_sums(accs: list[str], W: int, e: str) -> tuple[list[str], str, int]:
    """(IR, a vector whose lane j is key j's sum, its width): the NK accumulators ``accs`` (one key each, W lanes)
    added by ``hsum``'s tree for every key at once. A level pairs vectors: each key's lanes split into a low and a
    high half, the halves of both vectors gathered side by side and added - a key then takes half as many lanes;
    once one vector is left, it folds onto itself the same way until a key has one lane."""
    L: list[str] = []
    level, keys, width = list(accs), 1, W  # keys per vector, lanes per vector
    step = 0
    while len(level) > 1:
        seg = width // keys  # lanes of one key
        lo = [k * seg + i for k in range(keys) for i in range(seg // 2)]
        hi = [x + seg // 2 for x in lo]
        lo2, hi2 = lo + [width + x for x in lo], hi + [width + x for x in hi]
        nxt = []
        for a in range(0, len(level), 2):
            v = f"%ts{e}_{step}_{a}"
            idx_lo, idx_hi = ", ".join(f"i32 {x}" for x in lo2), ", ".join(f"i32 {x}" for x in hi2)
            pair = f"{_vec(width)} {level[a]}, {_vec(width)} {level[a + 1]}"
            L += [
                f"  {v}.l = shufflevector {pair}, <{width} x i32> <{idx_lo}>",
                f"  {v}.h = shufflevector {pair}, <{width} x i32> <{idx_hi}>",
                f"  {v} = fadd {_vec(width)} {v}.l, {v}.h",
            ]
            nxt.append(v)
        level, keys, step = nxt, keys * 2, step + 1
    v = level[0]
    while width > keys:  # one vector: fold each key's lanes onto themselves
        seg = width // keys
        lo = [k * seg + i for k in range(keys) for i in range(seg // 2)]
        hi = [x + seg // 2 for x in lo]
        half = width // 2
        n = f"%tf{e}_{step}"
        L += [
            f"  {n}.l = shufflevector {_vec(width)} {v}, {_vec(width)} poison, <{half} x i32> <{_lanes(lo)}>",
            f"  {n}.h = shufflevector {_vec(width)} {v}, {_vec(width)} poison, <{half} x i32> <{_lanes(hi)}>",
            f"  {n} = fadd {_vec(half)} {n}.l, {n}.h",
        ]
        v, width, step = n, half, step + 1
    return L, v, width


def scores(R: int, D: int, W: int, NK: int, kv: str = "f32") -> str:
    """``@scores_{R}`` (``_bf16``: keys as bf16 bits): R query rows (q + r·qs) against n keys (k + t·ks), NK keys a
    step; a step's key slots past
    n read key n-1 again and their scores land in s's padding (the caller leaves NK floats after row ends)."""
    C, v = D // W, _vec(W)
    L = [
        f"define void @scores_{R}{_suffix(kv)}(i64 %q, i64 %qs, i64 %k, i64 %ks, i64 %n, i64 %s, i64 %ss, i64 %scb) {{",
        "entry:",
    ]
    L += _splat_bits("%scale", "%scb", NK)
    L.append("  %last = sub i64 %n, 1")
    for r in range(R):
        L += [f"  %qo{r} = mul i64 %qs, {r}", f"  %qa{r} = add i64 %q, %qo{r}", f"  %so{r} = mul i64 %ss, {r}",
              f"  %sa{r} = add i64 %s, %so{r}"]  # fmt: skip
    L += ["  br label %loop", "loop:", "  %t = phi i64 [0, %entry], [%tn, %loop]"]
    for kk in range(NK):
        L += [
            f"  %i{kk} = add i64 %t, {kk}",
            f"  %in{kk} = icmp ult i64 %i{kk}, %n",
            f"  %j{kk} = select i1 %in{kk}, i64 %i{kk}, i64 %last",
            f"  %ko{kk} = mul i64 %j{kk}, %ks",
            f"  %ka{kk} = add i64 %k, %ko{kk}",
        ]
    for c in range(C):
        for kk in range(NK):
            L += _chunk(f"%kc{kk}_{c}", f"%ka{kk}", c, W, kv)
        for r in range(R):
            L += [f"  %qc{r}_{c}.a = add i64 %qa{r}, {4 * W * c}", *_ptr(f"%qc{r}_{c}.p", f"%qc{r}_{c}.a"),
                  f"  %qc{r}_{c} = load {v}, ptr %qc{r}_{c}.p, align 4"]  # fmt: skip
            for kk in range(NK):
                a = f"%a{r}_{kk}_{c}"
                if c == 0:
                    L.append(f"  {a} = fmul {v} %qc{r}_{c}, %kc{kk}_{c}")
                else:
                    L.append(f"  {a} = call {v} {_fma(W)}({v} %qc{r}_{c}, {v} %kc{kk}_{c}, {v} %a{r}_{kk}_{c - 1})")
    for r in range(R):
        tree, total, width = transposed_sums([f"%a{r}_{kk}_{C - 1}" for kk in range(NK)], W, str(r))
        assert width == NK
        L += tree
        L += [
            f"  %sc{r} = fmul {_vec(NK)} {total}, %scale",
            f"  %st{r}.o = mul i64 %t, 4",
            f"  %st{r}.a = add i64 %sa{r}, %st{r}.o",
            *_ptr(f"%st{r}.p", f"%st{r}.a"),
            f"  store {_vec(NK)} %sc{r}, ptr %st{r}.p, align 4",
        ]
    L += [f"  %tn = add i64 %t, {NK}", "  %more = icmp slt i64 %tn, %n", "  br i1 %more, label %loop, label %exit"]
    L += ["exit:", "  ret void", "}"]
    return "\n".join(L) + "\n"


def weighted(R: int, C: int, W: int, kv: str = "f32") -> str:
    """``@weighted_{R}`` (``_bf16``: values as bf16 bits): o[r, :C·W] += Σ_t p[r, t]·v[t, :C·W] over n keys, the
    accumulators in registers."""
    v = _vec(W)
    L = [
        f"define void @weighted_{R}{_suffix(kv)}(i64 %p, i64 %ps, i64 %v, i64 %vs, i64 %n, i64 %o, i64 %os) {{",
        "entry:",
    ]
    for r in range(R):
        L += [f"  %po{r} = mul i64 %ps, {r}", f"  %pa{r} = add i64 %p, %po{r}"]
        for c in range(C):
            L += [f"  %oa{r}_{c}.r = mul i64 %os, {r}", f"  %oa{r}_{c} = add i64 %o, %oa{r}_{c}.r",
                  f"  %ob{r}_{c} = add i64 %oa{r}_{c}, {4 * W * c}", *_ptr(f"%op{r}_{c}", f"%ob{r}_{c}"),
                  f"  %o0_{r}_{c} = load {v}, ptr %op{r}_{c}, align 4"]  # fmt: skip
    L += ["  br label %loop", "loop:", "  %t = phi i64 [0, %entry], [%tn, %loop]"]
    for r in range(R):
        for c in range(C):
            L.append(f"  %acc{r}_{c} = phi {v} [%o0_{r}_{c}, %entry], [%nx{r}_{c}, %loop]")
    L += ["  %vo = mul i64 %t, %vs", "  %va = add i64 %v, %vo", "  %pt = mul i64 %t, 4"]
    for c in range(C):
        L += _chunk(f"%vc{c}", "%va", c, W, kv)
    for r in range(R):
        L += [f"  %pw{r}.a = add i64 %pa{r}, %pt", *_ptr(f"%pw{r}.p", f"%pw{r}.a"),
              f"  %pw{r}.f = load float, ptr %pw{r}.p, align 4", *_splat(f"%pw{r}", f"%pw{r}.f", W)]  # fmt: skip
        for c in range(C):
            L.append(f"  %nx{r}_{c} = call {v} {_fma(W)}({v} %pw{r}, {v} %vc{c}, {v} %acc{r}_{c})")
    L += ["  %tn = add i64 %t, 1", "  %more = icmp slt i64 %tn, %n", "  br i1 %more, label %loop, label %exit", "exit:"]
    for r in range(R):
        for c in range(C):
            L.append(f"  store {v} %nx{r}_{c}, ptr %op{r}_{c}, align 4")
    L += ["  ret void", "}"]
    return "\n".join(L) + "\n"


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
