"""The float register tiles' LLVM IR (bf16 bits, MLX 8-bit codes, planar 4-bit codes): what tiles.py runs.

Each function computes an NR×MR block of outputs with tiles.py's ABI; the per-element arithmetic (tiles.py's
docstring) is the same for every NR and MR, which is what makes the tiles batch invariant.
"""

import re

from . import half_scales
from .superblock_scales import scale_and_bias

# Bytes ahead of each weight load that the tiles prefetch: a thread walks its rows of a contiguous matrix in
# order, so loads at +PREFETCH cover every line just before it is needed. Rows of 0.5-6 KiB end too soon for
# the hardware prefetcher to keep up (it stops at each 4 KiB page): a 0.6B decode matrix from memory streamed
# 9-14 GB/s without, 18-24 with (docs/performance.md). A hint only: it never faults and changes no result.
PREFETCH = 32768
# Into L2, not L1 (prefetcht1): the lines fetched ahead wait in L2 instead of pushing a call's activations out of
# the 32 KiB L1. With a few input rows per call that was the cost of every row after the first: a bf16 gate matrix
# from memory at 5 rows took 1.6x its 1-row time with L1 prefetches, 1.07x with L2 ones (docs/performance.md).
LOCALITY = 2
LINE = 64  # bytes per cache line
DECLARATIONS = """declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
declare float @llvm.fma.f32(float, float, float)
"""


def _splat(name: str, scalar: str, W: int) -> list[str]:
    return [
        f"  {name}.0 = insertelement <{W} x float> poison, float {scalar}, i32 0",
        f"  {name} = shufflevector <{W} x float> {name}.0, <{W} x float> poison, <{W} x i32> zeroinitializer",
    ]


def _row(base: str, stride: str, n: int, name: str) -> list[str]:
    """%name = base + n * stride (the address of weight row n of the tile, or of its scales / biases)."""
    return [f"  %{name}m = mul i64 {stride}, {n}", f"  %{name} = add i64 {base}, %{name}m"]


def hsum(v: str, W: int, e: str) -> tuple[list[str], str]:
    """(IR, the scalar) adding the W lanes (16, 8 or 4) of ``v`` by every tile's tree (tiles.py): the low half and the
    high half, lane by lane, down to one: 16 lanes (0..7)+(8..15), then (0..3)+(4..7), (0,1)+(2,3), the two.
    ``e`` makes the names unique."""
    L: list[str] = []
    while W > 1:
        h = W // 2
        lo, hi = ", ".join(f"i32 {i}" for i in range(h)), ", ".join(f"i32 {i}" for i in range(h, W))
        vt, ht = f"<{W} x float>", f"<{h} x float>" if h > 1 else "float"
        if h == 1:
            L += [f"  %hs{W}l{e} = extractelement {vt} {v}, i32 0", f"  %hs{W}h{e} = extractelement {vt} {v}, i32 1"]
        else:
            L += [
                f"  %hs{W}l{e} = shufflevector {vt} {v}, {vt} poison, <{h} x i32> <{lo}>",
                f"  %hs{W}h{e} = shufflevector {vt} {v}, {vt} poison, <{h} x i32> <{hi}>",
            ]
        L.append(f"  %hs{W}s{e} = fadd {ht} %hs{W}l{e}, %hs{W}h{e}")
        v, W = f"%hs{W}s{e}", h
    return L, v


def _lanes(idx: list[int]) -> str:
    return ", ".join(f"i32 {x}" for x in idx)


def transposed_sums(accs: list[str], W: int, e: str) -> tuple[list[str], str, int]:
    """(IR, a vector whose lane j is ``accs[j]``'s sum, its width): up to W accumulators of W lanes added by
    ``hsum``'s tree, all at once. A level pairs vectors: each accumulator's lanes split into a low and a high half,
    the halves of both vectors gathered side by side and added - an accumulator then takes half as many lanes; once
    one vector is left, it folds onto itself the same way until each has one lane. A count that is not a power of
    two is padded with poison, lanes nobody reads. Every sum is ``hsum``'s additions in ``hsum``'s order (the same
    bits) at a fraction of the instructions: 16 accumulators of 16 lanes take 15 vector adds and 30 shuffles, one
    tree each took 16 × 4 adds and as many extracts."""
    if not 0 < len(accs) <= W:
        raise ValueError(f"transposed_sums adds 1 to {W} accumulators of {W} lanes, got {len(accs)}")
    P = 1 << (len(accs) - 1).bit_length()
    level, keys, width = [*accs, *["poison"] * (P - len(accs))], 1, W  # keys per vector, lanes per vector
    L: list[str] = []
    step = 0
    while len(level) > 1:
        seg = width // keys  # lanes of one key
        lo = [k * seg + i for k in range(keys) for i in range(seg // 2)]
        hi = [x + seg // 2 for x in lo]
        lo2, hi2 = lo + [width + x for x in lo], hi + [width + x for x in hi]
        nxt = []
        for a in range(0, len(level), 2):
            if level[a] == "poison":  # padding paired with padding (it sorts last): nothing to add
                nxt.append("poison")
                continue
            v = f"%ts{e}_{step}_{a}"
            pair = f"<{width} x float> {level[a]}, <{width} x float> {level[a + 1]}"
            L += [
                f"  {v}.l = shufflevector {pair}, <{width} x i32> <{_lanes(lo2)}>",
                f"  {v}.h = shufflevector {pair}, <{width} x i32> <{_lanes(hi2)}>",
                f"  {v} = fadd <{width} x float> {v}.l, {v}.h",
            ]
            nxt.append(v)
        level, keys, step = nxt, keys * 2, step + 1
    v = level[0]
    while width > keys:  # one vector: fold each key's lanes onto themselves
        seg, half = width // keys, width // 2
        lo = [k * seg + i for k in range(keys) for i in range(seg // 2)]
        hi = [x + seg // 2 for x in lo]
        n = f"%tf{e}_{step}"
        L += [
            f"  {n}.l = shufflevector <{width} x float> {v}, <{width} x float> poison, <{half} x i32> <{_lanes(lo)}>",
            f"  {n}.h = shufflevector <{width} x float> {v}, <{width} x float> poison, <{half} x i32> <{_lanes(hi)}>",
            f"  {n} = fadd <{half} x float> {n}.l, {n}.h",
        ]
        v, width, step = n, half, step + 1
    return L, v, width


Elements = dict[tuple[int, int], str]  # (weight row n, input row r) -> an IR value of the tile


def stores(accs: Elements, bsums: Elements | None, NR: int, MR: int, W: int) -> list[str]:
    """Output element (n, r) = hsum(accs[n, r]) [+ bsums[n, r]] for a whole NR×MR tile, stored at po + r·so + 4n: the
    trees all at once (``transposed_sums``, row after row so that a row's NR outputs sit in adjacent lanes), the
    biases' sums added lane by lane, then one store of NR floats per input row. The sum's tree is part of every
    tile's contract (``hsum``); the order of the work is not."""
    order = [(n, r) for r in range(MR) for n in range(NR)]
    L, total, width = transposed_sums([accs[e] for e in order], W, "out")
    if bsums is not None:
        for j, e in enumerate(order):
            prev = "poison" if j == 0 else f"%sbv{j - 1}"
            L.append(f"  %sbv{j} = insertelement <{width} x float> {prev}, float {bsums[e]}, i32 {j}")
        L.append(f"  %outb = fadd <{width} x float> {total}, %sbv{len(order) - 1}")
        total = "%outb"
    for r in range(MR):
        lanes = _lanes(list(range(r * NR, (r + 1) * NR)))
        L += [
            f"  %orow{r} = shufflevector <{width} x float> {total}, <{width} x float> poison, <{NR} x i32> <{lanes}>",
            *_row("%po", "%so", r, f"or{r}"),
            f"  %op{r} = inttoptr i64 %or{r} to ptr",
            f"  store <{NR} x float> %orow{r}, ptr %op{r}, align 4",
        ]
    return L


def _weights(kind: str, n: int, W: int) -> list[str]:
    """Weight row n's W-wide chunk(s) %w{n}_{h} at chunk %t as floats: widened bf16 bits, or the codes themselves
    (8-bit: one chunk; planar 4-bit: the low-nibble then the high-nibble chunk of the same W code bytes)."""
    width = 2 * W if kind == "bf16" else W  # bytes per chunk of codes
    lines = [
        *_row("%pw", "%sw", n, f"wrow{n}"),
        f"  %wo{n} = mul i64 %t, {width}",
        f"  %wa{n} = add i64 %wrow{n}, %wo{n}",
        f"  %wp{n} = inttoptr i64 %wa{n} to ptr",
    ]
    lines += prefetch(f"%pf{n}", f"%wa{n}")
    if kind == "bf16":
        return [
            *lines,
            f"  %wh{n} = load <{W} x i16>, ptr %wp{n}, align 2",
            f"  %wz{n} = zext <{W} x i16> %wh{n} to <{W} x i32>",
            f"  %ws{n} = shl <{W} x i32> %wz{n}, splat (i32 16)",
            f"  %w{n}_0 = bitcast <{W} x i32> %ws{n} to <{W} x float>",
        ]
    lines.append(f"  %wb{n} = load <{W} x i8>, ptr %wp{n}, align 1")
    planes = [f"%wb{n}"]
    if kind == "q4":
        lines += [
            f"  %lo{n} = and <{W} x i8> %wb{n}, splat (i8 15)",
            f"  %hi{n} = lshr <{W} x i8> %wb{n}, splat (i8 4)",
        ]
        planes = [f"%lo{n}", f"%hi{n}"]
    return lines + [f"  %w{n}_{h} = uitofp <{W} x i8> {c} to <{W} x float>" for h, c in enumerate(planes)]


def prefetch(name: str, address: str, nbytes: int = LINE, ahead: int | None = None) -> list[str]:
    """Hint the lines of the ``nbytes`` bytes ``ahead`` (default PREFETCH) bytes past ``address`` into the cache
    (read, data, LOCALITY: L2): one hint per 64-byte line a loop step reads. A step of two lines with one hint left
    every other line to the hardware prefetcher, which stops at each 4 KiB page: the VNNI tile for groups of 32 (128
    code bytes a step) streamed a Q4_K matrix at 21-22 GB/s, with both lines hinted at 29-32 (docs/performance.md)."""
    ahead = PREFETCH if ahead is None else ahead
    if not ahead:
        return []
    L = []
    for j in range(max(1, nbytes // LINE)):
        t = f"{name}{'' if j == 0 else f'.{j}'}"
        L += [
            f"  {t}.a = add i64 {address}, {ahead + j * LINE}",
            f"  {t}.p = inttoptr i64 {t}.a to ptr",
            f"  call void @llvm.prefetch.p0(ptr {t}.p, i32 0, i32 {LOCALITY}, i32 1)",
        ]
    return L


def _load_float(name: str, base: str, index: str) -> list[str]:
    """%name = the float at base + 4·index."""
    return [
        f"  {name}.o = mul i64 {index}, 4",
        f"  {name}.a = add i64 {base}, {name}.o",
        f"  {name}.p = inttoptr i64 {name}.a to ptr",
        f"  {name} = load float, ptr {name}.p, align 4",
    ]


def _unrolled(outer: list[str], inner: list[str], latch: list[str], chunks: int) -> tuple[list[str], ...]:
    """The inner loop's body repeated ``chunks`` times inside the group loop: %j becomes the constant, every name
    the body defines gets a ``.u{j}`` suffix, the accumulator phis become the previous copy's results (zero first)."""
    phis = {ln.split(" = ")[0].strip(): ln for ln in inner if " = phi " in ln and "%acc" in ln}
    body = [ln for ln in inner[1:] if " = phi " not in ln and not ln.strip().startswith(("br ", "%jn", "%jd"))]
    defined = {ln.split(" = ")[0].strip() for ln in body if " = " in ln}
    token = re.compile(r"%[\w.]+")
    out: list[str] = []
    for j in range(chunks):
        if j:  # one prefetch per group and weight row: a group's codes are one 64-byte line (8-bit, planar 4-bit)
            body = [ln for ln in body if "%pf" not in ln]

        def rename(m: re.Match[str], j: int = j) -> str:
            name = m.group(0)
            if name == "%j":
                return str(j)
            if name in phis:  # this chunk's accumulator: the previous chunk's result, or zero
                return "zeroinitializer" if j == 0 else "%n" + name[1:] + f".u{j - 1}"
            return f"{name}.u{j}" if name in defined else name

        out += [token.sub(rename, ln) for ln in body]
    last = {"%n" + name[1:]: "%n" + name[1:] + f".u{chunks - 1}" for name in phis}
    fold = [token.sub(lambda m: last.get(m.group(0), m.group(0)), ln) for ln in latch[1:]]
    head = [ln.replace("%latch", "%outer") for ln in outer if not ln.strip().startswith("br ")]
    return head, out, fold


def microkernel(kind: str, NR: int, MR: int, G: int, W: int = 8, layout: str | None = None) -> str:
    """``@{kind}_{NR}x{MR}`` (``@{kind}w_…`` for W = 16) with tiles.py's ABI: an NR×MR block of outputs.

    Two loops: groups, then the ``per_group`` W-wide chunks inside a group (bf16: one "group" of every chunk).
    bf16: one accumulator per element runs through both. Affine codes: a group accumulator ``q·x`` per element
    (and per nibble plane), folded in at the group's end as ``acc = fma(gacc, scale, acc)``, with the bias term
    ``bsum = fma(bias, Σx_g, bsum)`` from the per-row group sums in ``pa`` (float32 [m, groups·planes]); the
    output is ``hsum(acc) + bsum``. With ``layout`` (affine kinds) ps/sg address each row's super-block records
    and every scale and bias is made from them (superblock_scales.py: the same values, so the same bits), or, for
    ``"bf16"`` / ``"f16"``, ps/pb/sg address 16-bit scales and biases, widened as read (half_scales.py: the same
    bits too)."""
    if layout is not None and kind == "bf16":
        raise ValueError("bf16 weights have no scales to read from super-block records")
    pairs = [(n, r) for n in range(NR) for r in range(MR)]
    affine = kind != "bf16"
    halves = 2 if kind == "q4" else 1
    entry = ["entry:", "  br label %outer"]
    outer = ["outer:", "  %g = phi i64 [0, %entry], [%gn, %latch]"]
    for n, r in pairs:
        outer.append(f"  %oacc{n}_{r} = phi <{W} x float> [zeroinitializer, %entry], [%lacc{n}_{r}, %latch]")
        if affine:
            outer.append(f"  %obs{n}_{r} = phi float [0.0, %entry], [%lbs{n}_{r}, %latch]")
    outer.append("  br label %inner")
    inner = ["inner:", "  %j = phi i64 [0, %outer], [%jn, %inner]"]
    acc = {}  # (n, r, h) -> the accumulator this chunk's products go into
    for n, r in pairs:
        for h in range(halves):
            start = f"%oacc{n}_{r}" if not affine else "zeroinitializer"
            inner.append(f"  %acc{n}_{r}_{h} = phi <{W} x float> [{start}, %outer], [%nacc{n}_{r}_{h}, %inner]")
            acc[n, r, h] = f"%acc{n}_{r}_{h}"
    inner += ["  %tg = mul i64 %g, %per_group", "  %t = add i64 %tg, %j"]
    if kind == "q4":  # x offsets (floats): chunk t's low plane starts at 2G·g + Wj, its high plane G later
        inner += [f"  %xg = mul i64 %g, {2 * G}", f"  %xj = mul i64 %j, {W}", "  %xo_0 = add i64 %xg, %xj"]
        inner.append(f"  %xo_1 = add i64 %xo_0, {G}")
    else:
        inner.append(f"  %xo_0 = mul i64 %t, {W}")
    for n in range(NR):
        inner += _weights(kind, n, W)
    for h in range(halves):
        for r in range(MR):
            inner += [
                *_row("%px", "%sx", r, f"xr{r}_{h}"),
                f"  %xb{r}_{h} = mul i64 %xo_{h}, 4",
                f"  %xa{r}_{h} = add i64 %xr{r}_{h}, %xb{r}_{h}",
                f"  %xp{r}_{h} = inttoptr i64 %xa{r}_{h} to ptr",
                f"  %x{r}_{h} = load <{W} x float>, ptr %xp{r}_{h}, align 4",
            ]
    for n, r in pairs:
        for h in range(halves):
            inner.append(
                f"  %nacc{n}_{r}_{h} = call <{W} x float> @llvm.fma.v{W}f32(<{W} x float> %w{n}_{h}, "
                f"<{W} x float> %x{r}_{h}, <{W} x float> {acc[n, r, h]})"
            )
    inner += ["  %jn = add i64 %j, 1", "  %jd = icmp sge i64 %jn, %per_group"]
    inner.append("  br i1 %jd, label %latch, label %inner")
    latch = ["latch:"]
    if not affine:
        latch += [f"  %lacc{n}_{r} = bitcast <{W} x float> %nacc{n}_{r}_0 to <{W} x float>" for n, r in pairs]
    else:
        gidx = ["%g"] if kind == "q8" else ["%g2", "%g21"]
        if kind == "q4":
            latch += ["  %g2 = mul i64 %g, 2", "  %g21 = add i64 %g2, 1"]
        for n in range(NR):
            latch += _row("%ps", "%sg", n, f"srow{n}") + _row("%pb", "%sg", n, f"brow{n}")
            for h in range(halves):
                if layout in half_scales.LAYOUTS:
                    srow, brow = f"%srow{n}", f"%brow{n}"
                    latch += half_scales.scale_and_bias(f"%s{n}_{h}", f"%b{n}_{h}", srow, brow, gidx[h], layout)
                elif layout is not None:
                    latch += scale_and_bias(f"%s{n}_{h}", f"%b{n}_{h}", f"%srow{n}", gidx[h], layout)
                else:
                    latch += _load_float(f"%s{n}_{h}", f"%srow{n}", gidx[h])
                    latch += _load_float(f"%b{n}_{h}", f"%brow{n}", gidx[h])
                latch += _splat(f"%ss{n}_{h}", f"%s{n}_{h}", W)
        for r in range(MR):
            latch += _row("%pa", "%sa", r, f"arow{r}")
            for h in range(halves):
                latch += _load_float(f"%xs{r}_{h}", f"%arow{r}", gidx[h])
        for n, r in pairs:
            prev_acc, prev_b = f"%oacc{n}_{r}", f"%obs{n}_{r}"
            for h in range(halves):
                last = h == halves - 1
                cur_acc = f"%lacc{n}_{r}" if last else f"%macc{n}_{r}_{h}"
                cur_b = f"%lbs{n}_{r}" if last else f"%mbs{n}_{r}_{h}"
                latch += [
                    f"  {cur_acc} = call <{W} x float> @llvm.fma.v{W}f32(<{W} x float> %nacc{n}_{r}_{h}, "
                    f"<{W} x float> %ss{n}_{h}, <{W} x float> {prev_acc})",
                    f"  {cur_b} = call float @llvm.fma.f32(float %b{n}_{h}, float %xs{r}_{h}, float {prev_b})",
                ]
                prev_acc, prev_b = cur_acc, cur_b
    latch += ["  %gn = add i64 %g, 1", "  %gd = icmp sge i64 %gn, %groups", "  br i1 %gd, label %exit, label %outer"]
    if affine:  # a group's G/W chunks unrolled into the group loop (an 8-trip inner loop cost 35 % from memory)
        outer, inner, latch = _unrolled(outer, inner, latch, G // W)
    accs, bsums = {(n, r): f"%lacc{n}_{r}" for n, r in pairs}, {(n, r): f"%lbs{n}_{r}" for n, r in pairs}
    tail = ["exit:", *stores(accs, bsums if affine else None, NR, MR, W), "  ret void"]
    from .tiles import ABI

    name = f"{kind}{'w' if W == 16 else ''}{'_' + layout if layout else ''}_{NR}x{MR}"
    return f"define void @{name}({ABI}) {{\n" + "\n".join(entry + outer + inner + latch + tail) + "\n}\n"
