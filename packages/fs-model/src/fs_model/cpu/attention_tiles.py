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
    exp_shifted(s, n, m, p)                   # p[t] = exp(s[t] - m), t < n  (softmax_tiles.py, with a row's max / sum)

every argument an i64: addresses (float32 rows), byte strides, counts, and the scale / max as float32 bits. The
``_bf16`` variants read keys and values as bf16 bits, the ``_q{bits}g{gs}`` ones as a quantized cache's codes
(attention_codes.py) and take its scales' and biases' addresses and row strides after the other arguments.

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

from . import attention_codes
from .float_tiles import _splat, prefetch, transposed_sums

# Bytes ahead of each key and value row read that scores and weighted hint into L2 (float_tiles.prefetch). A
# sequence's keys for one KV head are one contiguous run, but a decode step reads many short runs (a batch of 8 at
# 150 positions: 8 x 8 runs of 38 KiB of K and of V a layer, each walked once), and the hardware prefetcher, which
# stops at every 4 KiB page, left the loads waiting: the 28 layers' attention of that step, each layer's cache its
# own (138 MB) took 5.6-6.4 ms on two threads (21-24 GB/s), 4.5-5.5 ms hinted 2 KiB ahead (1.5 and 3 KiB: the same
# within noise); a whole int4 batch-8 step 22.6-22.8 -> 21.0-22.2 ms (Zen 5, 2026-12-08; prefill-1024 unchanged).
# The hints past a run's last position read slots no one uses: 2 KiB a run, ~5 % of that step's bytes.
AHEAD = 2048

DECLARATIONS = """declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)
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


def _row_bytes(dims: int, kv: str) -> int:
    """Bytes ``dims`` values of a key or value row take as stored: float32, bf16 bits or ``bits``-bit codes."""
    return dims * 4 if kv == "f32" else dims * 2 if kv == "bf16" else dims * attention_codes.parse(kv)[0] // 8


def _suffix(kv: str) -> str:
    return "" if kv == "f32" else "_" + kv


def _coded(kv: str) -> bool:
    """A quantized cache's kind (attention_codes.kind): its kernels take the rows' scales and biases too."""
    return kv.startswith("q")


def _scale_args(kv: str) -> str:
    """The arguments a kernel over codes takes after the others: scales and biases, each an address and a row stride."""
    return ", i64 %sc, i64 %scs, i64 %bi, i64 %bis" if _coded(kv) else ""


def _chunk(name: str, row: str, c: int, W: int, kv: str, key: str) -> list[str]:
    """%name = lanes c·W .. c·W+W-1 of a key or value row at address ``row`` (position ``key`` of the call) as
    floats: float32 as it is, bf16 bits widened (shifted into a float32's high half: exact, the values a widened copy
    would hold), codes as attention_codes.chunk turns them (the floats a dequantized copy would hold)."""
    if _coded(kv):
        return attention_codes.chunk(name, row, key, c, W, kv)
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


def scores(R: int, D: int, W: int, NK: int, kv: str = "f32") -> str:
    """``@scores_{R}`` (``_bf16``: keys as bf16 bits): R query rows (q + r·qs) against n keys (k + t·ks), NK keys a
    step; a step's key slots past
    n read key n-1 again and their scores land in s's padding (the caller leaves NK floats after row ends)."""
    C, v = D // W, _vec(W)
    L = [
        f"define void @scores_{R}{_suffix(kv)}(i64 %q, i64 %qs, i64 %k, i64 %ks, i64 %n, i64 %s, i64 %ss, i64 %scb"
        f"{_scale_args(kv)}) {{",
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
            *prefetch(f"%pk{kk}", f"%ka{kk}", _row_bytes(D, kv), AHEAD),
        ]
    for c in range(C):
        for kk in range(NK):
            L += _chunk(f"%kc{kk}_{c}", f"%ka{kk}", c, W, kv, f"%j{kk}")
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
        f"define void @weighted_{R}{_suffix(kv)}(i64 %p, i64 %ps, i64 %v, i64 %vs, i64 %n, i64 %o, i64 %os"
        f"{_scale_args(kv)}) {{",
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
    L += prefetch("%pv", "%va", _row_bytes(C * W, kv), AHEAD)
    for c in range(C):
        L += _chunk(f"%vc{c}", "%va", c, W, kv, "%t")
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
