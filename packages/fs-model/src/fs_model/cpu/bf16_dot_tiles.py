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

import numpy as np

from . import HAVE_NUMBA
from .float_tiles import prefetch, stores

CHUNK = 32  # weights (and activations) per vdpbf16ps: 64 bytes of each
FEATURES = ("avx512f", "avx512bw", "avx512bf16")
DECLARATIONS = """declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
"""


# ``bf16di``: the same tiles over weights interleaved per 4 rows (``interleave``): row n's chunk t at the 4-row
# group's start + 256t + 64n, so a 4-row tile reads one stream instead of four rows 2 KiB apart - this core fetches
# one stream faster (the 196 bf16 matrices of Qwen3-0.6B from memory at 4 rows: 25.7 -> 22.3 ms, 8 rows 28.6 ->
# 25.6, one row even with a 4×1 tile; Zen 5, 2026-12-07). Each element's chain is the contract's: the same bits.
ROWS = 4  # rows a group of the interleaved layout holds


def interleave(w: np.ndarray) -> np.ndarray:
    """bf16 bits [n, k] (n % 4 == 0, k % 32 == 0) -> the same shape, each 4 rows' 64-byte chunks taken in turn. A
    compiled copy on every core where numba is (numpy's strided copy took 0.65 s for Qwen3-0.6B's 1.2 GB)."""
    n, k = w.shape
    if not HAVE_NUMBA:  # pragma: no cover - the bf16d tiles need numba: never chosen without it
        return np.ascontiguousarray(w.reshape(n // ROWS, ROWS, k // CHUNK, CHUNK).transpose(0, 2, 1, 3)).reshape(n, k)
    out = np.empty((n // ROWS, k // CHUNK, ROWS, CHUNK), np.uint16)
    _interleave(w.reshape(n // ROWS, ROWS, k // CHUNK, CHUNK), out)
    return out.reshape(n, k)


if HAVE_NUMBA:
    from numba import njit, prange

    @njit(parallel=True, cache=True)
    def _interleave(w, out):  # pragma: no cover - compiled
        """out[g, t, r] = w[g, r, t]: 4-row groups in parallel, 64 bytes a move."""
        for g in prange(w.shape[0]):
            for r in range(w.shape[1]):
                for t in range(w.shape[2]):
                    for j in range(w.shape[3]):
                        out[g, t, r, j] = w[g, r, t, j]


def rows_of(w: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Rows ``ids`` of an interleaved matrix in their own order (``interleave``'s inverse for those rows)."""
    n, k = w.shape
    ids = np.asarray(ids)
    flat = ids.reshape(-1)
    got = w.reshape(n // ROWS, k // CHUNK, ROWS, CHUNK)[flat // ROWS, :, flat % ROWS, :]
    return got.reshape(*ids.shape, k)


def _chunk(name: str, base: str, stride: str, row: int, fetch: bool, off: str = "%off") -> list[str]:
    """%name = the 32 bf16 values of chunk %t of row ``row`` (address base + row·stride + ``off``), prefetched."""
    L = [
        f"  %{name}.r = mul i64 {stride}, {row}",
        f"  %{name}.b = add i64 {base}, %{name}.r",
        f"  %{name}.a = add i64 %{name}.b, {off}",
        f"  %{name}.p = inttoptr i64 %{name}.a to ptr",
    ]
    if fetch:
        L += prefetch(f"%{name}.f", f"%{name}.a")
    return [*L, f"  %{name} = load <32 x bfloat>, ptr %{name}.p, align 2"]


def microkernel(NR: int, MR: int, fetch: bool = True, interleaved: bool = False) -> str:
    """``@bf16d_{NR}x{MR}``: NR weight rows (bf16 bits at pw, row stride sw bytes) against MR input rows (bf16 bits at
    px, row stride sx bytes), ``groups · per_group`` chunks of 32; outputs (float32) at po, row stride so.
    ``fetch=False``: ``@bf16d_{NR}x{MR}q``, the same without prefetching the weights (tiles.QUIET says when).
    ``interleaved``: ``@bf16di_{NR}x{MR}``, pw a 4-row group of ``interleave``'s layout (sw unread)."""
    from .tiles import ABI

    if interleaved and NR > ROWS:
        raise ValueError(f"an interleaved tile covers at most {ROWS} rows, got {NR}")

    pairs = [(n, r) for n in range(NR) for r in range(MR)]
    L = ["entry:", "  %chunks = mul i64 %groups, %per_group", "  br label %loop", "loop:"]
    L.append("  %t = phi i64 [0, %entry], [%tn, %loop]")
    L += [f"  %acc{n}_{r} = phi <16 x float> [zeroinitializer, %entry], [%nacc{n}_{r}, %loop]" for n, r in pairs]
    L.append(f"  %off = mul i64 %t, {2 * CHUNK}")
    if interleaved:
        L.append(f"  %woff = mul i64 %t, {2 * CHUNK * ROWS}")
    for n in range(NR):
        if interleaved:
            L += _chunk(f"w{n}", "%pw", str(2 * CHUNK), n, fetch=fetch, off="%woff")
        else:
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
    kind = "bf16di" if interleaved else "bf16d"
    return f"define void @{kind}_{NR}x{MR}{'' if fetch else 'q'}({ABI}) {{\n" + "\n".join(L) + "\n}\n"
