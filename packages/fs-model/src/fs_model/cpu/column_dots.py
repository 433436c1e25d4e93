"""The exact integer sums of a group in the column tiles (column_tiles.py): 16 output rows in the lanes, each chunk of
4 inputs × 16 rows multiplied by one input row's 4 int8 activations broadcast to every lane.

Two bodies give the same integers: AVX-512 VNNI, one ``vpdpbusd`` a chunk into 16 int32 lanes; AVX2, each chunk as
two halves of 8 rows through ``vpmaddubsw`` (unsigned codes × int8 into int16 pair sums), added as int16 over as
many chunks as stay exact for the codes' width, then ``vpmaddwd`` by ones into int32. Exact either way, so an AVX2
host computes every output with the bits of an AVX-512 one (tests/test_column_tiles.py).

    dots_vnni(MR, chunks)        -> (IR, per input row [its <16 x i32> sums])
    dots_avx2(MR, chunks, bits)  -> (IR, per input row [rows 0-7's <8 x i32> sums, rows 8-15's])

``chunks``: per chunk, the name of its codes (VNNI: one <16 x i32>; AVX2: two <32 x i8>); the activations are read
from %xg{r} (input row r's group), 4 bytes a chunk.
"""


def _load(name: str, address: str, ty: str, offset: int | str = 0) -> list[str]:
    at = f"{name}.a"
    return [
        f"  {at} = add i64 {address}, {offset}",
        f"  {name}.p = inttoptr i64 {at} to ptr",
        f"  {name} = load {ty}, ptr {name}.p, align 1",
    ]


def _splat(name: str, scalar: str, ty: str, elt: str, W: int = 16) -> list[str]:
    return [
        f"  {name}.0 = insertelement {ty} poison, {elt} {scalar}, i32 0",
        f"  {name} = shufflevector {ty} {name}.0, {ty} poison, <{W} x i32> zeroinitializer",
    ]


def dots_vnni(MR: int, chunks: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """A group's exact int32 sums, one ``vpdpbusd`` a chunk of 4 inputs: (IR, the sums' names per row, per half)."""
    L: list[str] = []
    for c, (codes,) in enumerate(chunks):
        for r in range(MR):
            prev = "zeroinitializer" if c == 0 else f"%I{r}_{c}"
            L += _load(f"%xw{r}_{c}", f"%xg{r}", "i32", 4 * c)
            L += _splat(f"%xs{r}_{c}", f"%xw{r}_{c}", "<16 x i32>", "i32", 16)
            L.append(
                f"  %I{r}_{c + 1} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> {prev}, "
                f"<16 x i32> {codes}, <16 x i32> %xs{r}_{c})"
            )
    return L, [[f"%I{r}_{len(chunks)}"] for r in range(MR)]


def dots_avx2(MR: int, chunks: list[list[str]], bits: int) -> tuple[list[str], list[list[str]]]:
    """The same sums on AVX2, each chunk as two halves of 8 rows: ``vpmaddubsw`` (codes < 2^bits times int8: pairs
    within ±2·(2^bits - 1)·127) added as int16 over a run of chunks short enough to stay exact (8 for 4-bit codes:
    ±30480; 4 for 5-bit, 2 for 6-bit), then ``vpmaddwd`` by ones into int32. Exact integers either way, so both
    bodies give every output the same bits."""
    run = 32767 // (2 * ((1 << bits) - 1) * 127)
    L: list[str] = []
    ones = "splat (i16 1)"
    acc: dict[tuple[int, int], str] = {}  # (row, half) -> int32 sum so far
    part: dict[tuple[int, int], str] = {}  # (row, half) -> int16 sum of this run of chunks
    for c, codes in enumerate(chunks):
        for r in range(MR):
            L += _load(f"%xw{r}_{c}", f"%xg{r}", "i32", 4 * c)
            L += _splat(f"%xs{r}_{c}.i", f"%xw{r}_{c}", "<8 x i32>", "i32", 8)
            L.append(f"  %xs{r}_{c} = bitcast <8 x i32> %xs{r}_{c}.i to <32 x i8>")
            for half in range(2):
                u = f"{r}_{c}_{half}"
                L.append(
                    f"  %m{u} = call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> {codes[half]}, "
                    f"<32 x i8> %xs{r}_{c})"
                )
                if c % run:
                    L.append(f"  %s{u} = add <16 x i16> {part[r, half]}, %m{u}")
                    part[r, half] = f"%s{u}"
                else:
                    part[r, half] = f"%m{u}"
                if c % run == run - 1 or c == len(chunks) - 1:  # a run ends: widen into the int32 sums
                    wd = "@llvm.x86.avx2.pmadd.wd"
                    L.append(f"  %w{u} = call <8 x i32> {wd}(<16 x i16> {part[r, half]}, <16 x i16> {ones})")
                    if (r, half) in acc:
                        L.append(f"  %a{u} = add <8 x i32> {acc[r, half]}, %w{u}")
                        acc[r, half] = f"%a{u}"
                    else:
                        acc[r, half] = f"%w{u}"
    return L, [[acc[r, 0], acc[r, 1]] for r in range(MR)]
