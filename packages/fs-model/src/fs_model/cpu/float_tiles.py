"""The float register tiles' LLVM IR (bf16 bits, MLX 8-bit codes, planar 4-bit codes): what tiles.py runs.

Each function computes an NR×MR block of outputs with tiles.py's ABI; the per-element arithmetic (tiles.py's
docstring) is the same for every NR and MR, which is what makes the tiles batch invariant.
"""

DECLARATIONS = "declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)\n"


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


def microkernel(kind: str, NR: int, MR: int, G: int) -> str:
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
    from .tiles import ABI

    return f"define void @{kind}_{NR}x{MR}({ABI}) {{\n" + "\n".join(entry + outer + inner + latch + tail) + "\n}\n"
