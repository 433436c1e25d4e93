"""Register-tiled, batch-invariant matrix kernels for kept weights (bf16 bits, MLX 8-bit and planar 4-bit codes).

Why: the row kernels (bf16.py, affine.py) compute each output element in its own loop, so a weight row is widened
or dequantized again for every input row and the activations are re-read for every weight row: 8 rows cost 8×
one row for int8 / int4 and 4-5× for bf16 (measured on the 0.6B gate matrix). A register tile of ``NR`` weight
rows × ``MR`` input rows converts each 8-weight chunk once for ``MR`` rows and loads each activation chunk once
for ``NR`` weight rows.

Invariance is kept by construction, in LLVM IR where the arithmetic is explicit (no reassociation flags):

    out[r, i] = hsum(acc),  acc = fma(w[i, c], x[r, c], acc) over the 8-wide chunks c in increasing order,
    acc starting at 0; hsum adds lanes (0..3)+(4..7), then (0,1)+(2,3), then the two; w[i, c] is widen(bf16)
    for bf16 and fma(code, scale, bias) per group for the affine codes (4-bit: each 8 code bytes give a low-nibble
    chunk then a high-nibble chunk).

Every tile shape (NR×MR, NR×1, 1×MR, 1×1) computes each element by exactly that chain, so the number of rows in a
call, a row's place in it and the other rows cannot move a bit. The bits differ from the row kernels' (another
order), so one host uses one of the two for every call: tiled where ``applies`` (this CPU has AVX2+FMA, the shape
tiles), else the row kernels.

    matmul(kind, w, X) -> [m, n] float32    # kind "bf16": w uint16 [n, k]; "q8"/"q4": an AffineWeight
"""

import ctypes
from typing import Any

import numpy as np

from . import HAVE_NUMBA, SWITCHES, int4_tiles
from .int4_tiles import quantize_rows
from .llvm_ir import ADDRESSES, compile_ir
from .threads import bucket, fan_out

# Tile shapes per format: (NR weight rows, MR input rows) for panels of 4, 2 and 1 input rows (a call's rows are
# covered by 4-row panels, then a 2-row and a 1-row one: decode batches of 1 and 2 are common). Chosen by
# measurement on the 0.6B shapes (docs/performance.md): AVX2's 16 vector registers hold the NR·MR accumulators
# beside the NR converted weight chunks and an activation chunk.
TILES = {
    "bf16": ((2, 4), (4, 2), (4, 1)),
    "q8": ((2, 4), (4, 2), (4, 1)),
    "q4": ((1, 4), (4, 2), (4, 1)),
    "q4i": ((1, 4), (2, 2), (2, 1)),  # 4-bit codes with int8 activations (int4_tiles.py)
}
BLOCK = 16  # weight rows per parallel work item (a thread's share is whole blocks)


# Every tile function's arguments (i64 addresses, strides in bytes, counts): weights, scales, biases and their row
# strides; the input panel and its row stride; per-row side data (int 4-bit: activation scales and sums); the output
# block and its row stride; the outer and inner trip counts.
ABI = ", ".join(
    f"i64 %{a}" for a in ("pw", "sw", "ps", "pb", "sg", "px", "sx", "pa", "sa", "po", "so", "groups", "per_group")
)


def _splat(name: str, scalar: str) -> list[str]:
    return [
        f"  {name}.0 = insertelement <8 x float> poison, float {scalar}, i32 0",
        f"  {name} = shufflevector <8 x float> {name}.0, <8 x float> poison, <8 x i32> zeroinitializer",
    ]


def _row(base: str, stride: str, n: int, name: str) -> list[str]:
    """%name = base + n * stride (the address of weight row n of the tile, or of its scales / biases)."""
    return [f"  %{name}m = mul i64 {stride}, {n}", f"  %{name} = add i64 {base}, %{name}m"]


def _group_constants(kind: str, NR: int) -> list[str]:
    """Per weight row: scale and bias splats of group %g (8-bit) or of groups 2%g and 2%g+1 (planar 4-bit)."""
    lines: list[str] = []
    for n in range(NR):
        lines += _row("%ps", "%sg", n, f"srow{n}") + _row("%pb", "%sg", n, f"brow{n}")
        for h in range(2 if kind == "q4" else 1):
            gi = "%g" if kind == "q8" else f"%gq{n}_{h}"
            if kind == "q4":
                lines.append(f"  %gq{n}_{h} = add i64 %g2, {h}")
            lines += [
                f"  %ga{n}_{h} = mul i64 {gi}, 4",
                f"  %sa{n}_{h} = add i64 %srow{n}, %ga{n}_{h}",
                f"  %ba{n}_{h} = add i64 %brow{n}, %ga{n}_{h}",
                f"  %sp{n}_{h} = inttoptr i64 %sa{n}_{h} to ptr",
                f"  %bp{n}_{h} = inttoptr i64 %ba{n}_{h} to ptr",
                f"  %s{n}_{h} = load float, ptr %sp{n}_{h}, align 4",
                f"  %b{n}_{h} = load float, ptr %bp{n}_{h}, align 4",
                *_splat(f"%ss{n}_{h}", f"%s{n}_{h}"),
                *_splat(f"%bs{n}_{h}", f"%b{n}_{h}"),
            ]
    return lines


def _weights(kind: str, n: int) -> list[str]:
    """Weight row n's converted 8-wide chunk(s) %w{n}_{h} at chunk %t (bf16 and 8-bit: one; planar 4-bit: the
    low-nibble chunk and the high-nibble chunk of the same 8 code bytes)."""
    width = 16 if kind == "bf16" else 8  # bytes per chunk of codes
    lines = [
        *_row("%pw", "%sw", n, f"wrow{n}"),
        f"  %wo{n} = mul i64 %t, {width}",
        f"  %wa{n} = add i64 %wrow{n}, %wo{n}",
        f"  %wp{n} = inttoptr i64 %wa{n} to ptr",
    ]
    if kind == "bf16":
        return [
            *lines,
            f"  %wh{n} = load <8 x i16>, ptr %wp{n}, align 2",
            f"  %wz{n} = zext <8 x i16> %wh{n} to <8 x i32>",
            f"  %ws{n} = shl <8 x i32> %wz{n}, splat (i32 16)",
            f"  %w{n}_0 = bitcast <8 x i32> %ws{n} to <8 x float>",
        ]
    lines.append(f"  %wb{n} = load <8 x i8>, ptr %wp{n}, align 1")
    planes = [f"%wb{n}"]
    if kind == "q4":
        lines += [f"  %lo{n} = and <8 x i8> %wb{n}, splat (i8 15)", f"  %hi{n} = lshr <8 x i8> %wb{n}, splat (i8 4)"]
        planes = [f"%lo{n}", f"%hi{n}"]
    for h, codes in enumerate(planes):
        lines += [
            f"  %cf{n}_{h} = uitofp <8 x i8> {codes} to <8 x float>",
            f"  %w{n}_{h} = call <8 x float> @llvm.fma.v8f32(<8 x float> %cf{n}_{h}, <8 x float> %ss{n}_{h}, "
            f"<8 x float> %bs{n}_{h})",
        ]
    return lines


def _microkernel(kind: str, NR: int, MR: int, G: int) -> str:
    """``@{kind}_{NR}x{MR}(pw, sw, ps, pb, sg, px, sx, pa, sa, po, so, groups, per_group)`` (ABI), an NR×MR block
    of outputs (``pa``/``sa``: per-row side data, unused by the float tiles).

    Two loops: groups (scale/bias splats made once each), then the ``per_group`` 8-wide chunks inside a group
    (bf16: one "group" of every chunk). The accumulators run through both, so each element is one chain."""
    pairs = [(n, r) for n in range(NR) for r in range(MR)]
    halves = 2 if kind == "q4" else 1
    entry = ["entry:", "  br label %outer"]
    outer = ["outer:", "  %g = phi i64 [0, %entry], [%gn, %latch]"]
    outer += [f"  %oacc{n}_{r} = phi <8 x float> [zeroinitializer, %entry], [%nacc{n}_{r}, %latch]" for n, r in pairs]
    if kind == "q4":
        outer.append("  %g2 = mul i64 %g, 2")
    if kind != "bf16":
        outer += _group_constants(kind, NR)
    outer.append("  br label %inner")
    inner = ["inner:", "  %j = phi i64 [0, %outer], [%jn, %inner]"]
    inner += [f"  %acc{n}_{r} = phi <8 x float> [%oacc{n}_{r}, %outer], [%nacc{n}_{r}, %inner]" for n, r in pairs]
    inner += ["  %tg = mul i64 %g, %per_group", "  %t = add i64 %tg, %j"]
    if kind == "q4":  # x offsets (floats): chunk t's low plane starts at 2G·g + 8j, its high plane G later
        inner += [f"  %xg = mul i64 %g, {2 * G}", "  %xj = mul i64 %j, 8", "  %xo_0 = add i64 %xg, %xj"]
        inner.append(f"  %xo_1 = add i64 %xo_0, {G}")
    else:
        inner.append("  %xo_0 = mul i64 %t, 8")
    for n in range(NR):
        inner += _weights(kind, n)
    for h in range(halves):
        for r in range(MR):
            inner += [
                *_row("%px", "%sx", r, f"xr{r}_{h}"),
                f"  %xb{r}_{h} = mul i64 %xo_{h}, 4",
                f"  %xa{r}_{h} = add i64 %xr{r}_{h}, %xb{r}_{h}",
                f"  %xp{r}_{h} = inttoptr i64 %xa{r}_{h} to ptr",
                f"  %x{r}_{h} = load <8 x float>, ptr %xp{r}_{h}, align 4",
            ]
    for n, r in pairs:
        prev = f"%acc{n}_{r}"
        for h in range(halves):
            cur = f"%nacc{n}_{r}" if h == halves - 1 else f"%pacc{n}_{r}_{h}"
            inner.append(
                f"  {cur} = call <8 x float> @llvm.fma.v8f32(<8 x float> %w{n}_{h}, <8 x float> %x{r}_{h}, "
                f"<8 x float> {prev})"
            )
            prev = cur
    inner += [
        "  %jn = add i64 %j, 1",
        "  %jd = icmp sge i64 %jn, %per_group",
        "  br i1 %jd, label %latch, label %inner",
    ]
    latch = [
        "latch:",
        "  %gn = add i64 %g, 1",
        "  %gd = icmp sge i64 %gn, %groups",
        "  br i1 %gd, label %exit, label %outer",
    ]
    tail = ["exit:"]
    for n, r in pairs:
        a, e = f"%nacc{n}_{r}", f"{n}_{r}"
        tail += [
            f"  %l{e} = shufflevector <8 x float> {a}, <8 x float> poison, <4 x i32> <i32 0, i32 1, i32 2, i32 3>",
            f"  %h{e} = shufflevector <8 x float> {a}, <8 x float> poison, <4 x i32> <i32 4, i32 5, i32 6, i32 7>",
            f"  %q{e} = fadd <4 x float> %l{e}, %h{e}",
            f"  %ql{e} = shufflevector <4 x float> %q{e}, <4 x float> poison, <2 x i32> <i32 0, i32 1>",
            f"  %qh{e} = shufflevector <4 x float> %q{e}, <4 x float> poison, <2 x i32> <i32 2, i32 3>",
            f"  %d{e} = fadd <2 x float> %ql{e}, %qh{e}",
            f"  %e0{e} = extractelement <2 x float> %d{e}, i32 0",
            f"  %e1{e} = extractelement <2 x float> %d{e}, i32 1",
            f"  %y{e} = fadd float %e0{e}, %e1{e}",
            *_row("%po", "%so", r, f"or{e}"),
            f"  %oa{e} = add i64 %or{e}, {n * 4}",
            f"  %op{e} = inttoptr i64 %oa{e} to ptr",
            f"  store float %y{e}, ptr %op{e}, align 4",
        ]
    tail.append("  ret void")
    return f"define void @{kind}_{NR}x{MR}({ABI}) {{\n" + "\n".join(entry + outer + inner + latch + tail) + "\n}\n"


_SIG = ctypes.CFUNCTYPE(None, *[ADDRESSES] * 13)
_compiled: dict[tuple[str, int], dict[str, Any] | None] = {}


def kernels(kind: str, G: int = 0) -> tuple[Any, ...] | None:
    """Per panel (4, 2, 1 input rows): its NR×MR tile function and its 1×MR edge function; compiled once."""
    key = (kind, G)
    shapes = [s for NR, MR in TILES[kind] for s in ((NR, MR), (1, MR))]
    names = [f"{kind}_{a}x{b}" for a, b in shapes]
    if key not in _compiled:
        unique = dict(zip(names, shapes, strict=True))  # an NR of 1 makes a tile its own edge
        ir = "declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)\n"
        if kind == "q4i":
            ir += int4_tiles.DECLARATIONS + "".join(int4_tiles.microkernel(a, b) for a, b in unique.values())
        else:
            ir += "".join(_microkernel(kind, a, b, G or 64) for a, b in unique.values())
        _compiled[key] = compile_ir(ir, ("avx2", "fma"), dict.fromkeys(unique, _SIG))
    fns = _compiled[key]
    if fns is None:
        return None
    return tuple(fns[n] for n in names)


if HAVE_NUMBA:
    from numba import njit, prange

    @njit(cache=True)
    def _panel(
        tile, edge, NR, lo, hi, pw, sw, ps, pb, sg, px, sx, pa, sa, po, so, groups, per_group
    ):  # pragma: no cover
        """One panel of input rows against weight rows lo..hi: NR-row tiles, then one-row edges."""
        i = lo
        while i + NR <= hi:
            tile(pw + i * sw, sw, ps + i * sg, pb + i * sg, sg, px, sx, pa, sa, po + i * 4, so, groups, per_group)
            i += NR
        while i < hi:
            edge(pw + i * sw, sw, ps + i * sg, pb + i * sg, sg, px, sx, pa, sa, po + i * 4, so, groups, per_group)
            i += 1

    @njit(parallel=True, cache=True)
    def _drive(fns, NRs, pw, sw, ps, pb, sg, m, px, sx, pa, sa, out, n, groups, per_group):  # pragma: no cover
        """Every BLOCK weight rows are one work item; inside, the input rows go in panels of 4, then 2, then 1,
        each against the block's weight rows (every tile computes each element by the same chain)."""
        t4, e4, t2, e2, t1, e1 = fns
        N4, N2, N1 = NRs
        po, so = out.ctypes.data, out.strides[0]
        for blk in prange((n + BLOCK - 1) // BLOCK):
            lo, hi = blk * BLOCK, min(n, blk * BLOCK + BLOCK)
            r = 0
            while r + 4 <= m:
                x, a, o = px + r * sx, pa + r * sa, po + r * so
                _panel(t4, e4, N4, lo, hi, pw, sw, ps, pb, sg, x, sx, a, sa, o, so, groups, per_group)
                r += 4
            if r + 2 <= m:
                x, a, o = px + r * sx, pa + r * sa, po + r * so
                _panel(t2, e2, N2, lo, hi, pw, sw, ps, pb, sg, x, sx, a, sa, o, so, groups, per_group)
                r += 2
            if r < m:
                x, a, o = px + r * sx, pa + r * sa, po + r * so
                _panel(t1, e1, N1, lo, hi, pw, sw, ps, pb, sg, x, sx, a, sa, o, so, groups, per_group)


def applies(kind: str, k: int, G: int = 0) -> bool:
    """This CPU runs the tiles (AVX2 + FMA; ``FS_TILES=0`` turns them off) and the shape tiles: k a multiple of 8
    (bf16, 8-bit) or an even number of groups of a multiple of 16 (planar 4-bit)."""
    if not (HAVE_NUMBA and SWITCHES.tiles):
        return False
    if kind == "q4" and (k % (2 * G) or G % 16):
        return False
    if kind == "q4i" and (G != int4_tiles.GROUP or k % (2 * G) or not SWITCHES.int8_activations):
        return False
    if k % 8 or (G and G % 8):
        return False
    return kernels(kind, G) is not None


def matmul(kind: str, w: Any, X: np.ndarray) -> np.ndarray:
    """``X [m, k] @ Wᵀ`` -> float32 [m, n] on the tiles (call ``applies`` first)."""
    X = np.ascontiguousarray(X, dtype=np.float32)
    m = X.shape[0]
    px, sx, pa, sa = X.ctypes.data, X.strides[0], 0, 0
    if kind == "bf16":
        codes, ps, pb, sg, G = w, 0, 0, 0, 0
        groups, per_group = 1, w.shape[1] // 8
    elif kind == "q4i":  # int8 activations per group, and [scales | sums] per row (int4_tiles.py's contract)
        codes, G = w.codes, w.group_size
        ps, pb, sg = w.scales.ctypes.data, w.biases.ctypes.data, w.scales.strides[0]
        groups, per_group = w.shape[1] // (2 * G), 0
        xq, xsc, xsum = quantize_rows(X)
        side = np.concatenate([xsc, xsum], axis=1)
        px, sx, pa, sa = xq.ctypes.data, xq.strides[0], side.ctypes.data, side.strides[0]
    else:
        codes, G = w.codes, w.group_size
        ps, pb, sg = w.scales.ctypes.data, w.biases.ctypes.data, w.scales.strides[0]
        groups, per_group = w.shape[1] // (2 * G if kind == "q4" else G), G // 8
    fns = kernels(kind, G)
    assert fns is not None
    n = codes.shape[0]
    out = np.empty((m, n), np.float32)
    key = ("tiles", kind, codes.shape, bucket(m))
    NRs = [NR for NR, _ in TILES[kind]]
    args = (codes.ctypes.data, codes.strides[0], ps, pb, sg, m, px, sx, pa, sa, out, n, groups, per_group)
    fan_out(key, _drive, fns, tuple(NRs), *args)
    return out
