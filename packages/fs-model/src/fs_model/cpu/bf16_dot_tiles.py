"""bf16 weights times bf16-rounded activations on AVX512-BF16 (``vdpbf16ps``): the register tiles' ``bf16d`` kind,
in LLVM IR.

Why: the ``bf16w`` tile widens every 16 weights to float32 (a shuffle and a shift) before one FMA per input row, so
at 4 input rows (a verify pass, a prefill panel) it is bound by instructions, not by memory: a 0.6B gate matrix from
memory cost 1.4x at 4 rows what it cost at 1. ``vdpbf16ps`` takes 32 bf16 weights and 32 bf16 activations as they
are and adds their pairwise products into 16 float32 lanes: a quarter of the instructions per weight. The price is
the activations' precision: each input row is rounded to bf16 once per call (round to nearest even,
``fused.to_bf16``), as mlx-lm's bf16 models and llama.cpp's BF16 path compute, and as this project's bf16 GEMM
prefill already did. ``FS_BF16_GEMM=0`` keeps float32 activations (the ``bf16w`` tile) everywhere.

Contract (every tile shape computes each element by it, so a row's bits do not depend on the call: batch invariant):

    xb = bf16(x)                                             one rounding per activation, per call
    acc lane j (j = 0..15) over chunks c = 0, 1, ... of 32:
        acc_j = (acc_j + w[32c+2j+1]·xb[32c+2j+1]) + w[32c+2j]·xb[32c+2j]
    out[r, i] = hsum16(acc)                                  float_tiles.hsum's tree

Each product of two bf16 values is exact in float32; each addition rounds to nearest even; inputs and results
below float32's normal range count as zero (the instruction's DAZ/FTZ). ``test_tiles.py`` checks this against a
numpy emulation bit for bit, so the chain is written down, not only whatever the CPU does.

    microkernel(NR, MR) -> "@bf16d_{NR}x{MR}" with tiles.py's ABI (groups = 1, per_group = k / 32)
"""

from .float_tiles import prefetch, stores

CHUNK = 32  # weights (and activations) per vdpbf16ps: 64 bytes of each
FEATURES = ("avx512f", "avx512bw", "avx512bf16")
DECLARATIONS = """declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
"""


def _chunk(name: str, base: str, stride: str, row: int, fetch: bool) -> list[str]:
    """%name = the 32 bf16 values of chunk %t of row ``row`` (address base + row·stride + 64t), prefetched ahead."""
    L = [
        f"  %{name}.r = mul i64 {stride}, {row}",
        f"  %{name}.b = add i64 {base}, %{name}.r",
        f"  %{name}.a = add i64 %{name}.b, %off",
        f"  %{name}.p = inttoptr i64 %{name}.a to ptr",
    ]
    if fetch:
        L += prefetch(f"%{name}.f", f"%{name}.a")
    return [*L, f"  %{name} = load <32 x bfloat>, ptr %{name}.p, align 2"]


def microkernel(NR: int, MR: int, fetch: bool = True) -> str:
    """``@bf16d_{NR}x{MR}``: NR weight rows (bf16 bits at pw, row stride sw bytes) against MR input rows (bf16 bits at
    px, row stride sx bytes), ``groups · per_group`` chunks of 32; outputs (float32) at po, row stride so.
    ``fetch=False``: ``@bf16d_{NR}x{MR}q``, the same without prefetching the weights (tiles.QUIET says when)."""
    from .tiles import ABI

    pairs = [(n, r) for n in range(NR) for r in range(MR)]
    L = ["entry:", "  %chunks = mul i64 %groups, %per_group", "  br label %loop", "loop:"]
    L.append("  %t = phi i64 [0, %entry], [%tn, %loop]")
    L += [f"  %acc{n}_{r} = phi <16 x float> [zeroinitializer, %entry], [%nacc{n}_{r}, %loop]" for n, r in pairs]
    L.append(f"  %off = mul i64 %t, {2 * CHUNK}")
    for n in range(NR):
        L += _chunk(f"w{n}", "%pw", "%sw", n, fetch=fetch)
    for r in range(MR):
        L += _chunk(f"x{r}", "%px", "%sx", r, fetch=False)  # the activations: a few KiB, already in cache
    L += [
        f"  %nacc{n}_{r} = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc{n}_{r}, "
        f"<32 x bfloat> %w{n}, <32 x bfloat> %x{r})"
        for n, r in pairs
    ]
    L += ["  %tn = add i64 %t, 1", "  %td = icmp sge i64 %tn, %chunks", "  br i1 %td, label %exit, label %loop"]
    L += ["exit:", *stores({(n, r): f"%nacc{n}_{r}" for n, r in pairs}, None, NR, MR, 16)]
    L.append("  ret void")
    return f"define void @bf16d_{NR}x{MR}{'' if fetch else 'q'}({ABI}) {{\n" + "\n".join(L) + "\n}\n"
