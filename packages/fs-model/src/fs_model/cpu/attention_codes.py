"""A quantized cache's keys and values read by the attention tiles in place: W lanes of a row of codes turned into
floats in registers (attention_tiles.py's ``_chunk`` calls this for the ``q{bits}g{group}`` kinds).

Why: until 2026-12-07 attention.py widened each tile of 64 positions into a float32 buffer (``_dequantize``) and the
tiles read the buffer back, so an 8-bit pool (half a bf16 pool's bytes) decoded at 0.82x the bf16 pool's speed: the
widening was a store and a load of every float beside the arithmetic. Here the codes go from memory to the FMAs.

Layout (``fs_kvcache.QuantizedKVCache``'s, per position and KV head): D codes packed little-endian into bytes - an
8-bit code d is byte d, a 4-bit code the low (even d) or high (odd d) nibble of byte d/2, a 2-bit code bits 2(d%4)
of byte d/4 - and one float32 scale and bias per ``gs`` dims, rows ``scs`` / ``bis`` bytes apart.

    value[d] = scale[d // gs] * float(code[d]) + bias[d // gs]     # a multiply, then an add: two float32 roundings

Contract: these are the very floats ``_dequantize`` writes (below: attention.py widens a tile of codes into a
buffer with it where the IR does not apply, and for a prefill chunk's queries). No fused multiply-add, and the test
reads the same codes both ways: attention over the codes has the bits attention over the dequantized rows has.
Worked example, 4-bit, W = 8, chunk 1 of a row (dims 8..15): bytes 4..7 = 0x21 0x43 0x65 0x87 give the codes
1 2 3 4 5 6 7 8 (low nibble first), each times its group's scale plus its bias.
"""

from . import HAVE_NUMBA
from .float_tiles import _splat


def kind(bits: int, gs: int) -> str:
    """The tiles' name for a cache of ``bits``-bit codes in groups of ``gs`` dims (a suffix of their kernels)."""
    return f"q{bits}g{gs}"


def parse(kv: str) -> tuple[int, int]:
    """(bits, group size) of a ``kind`` name."""
    bits, gs = kv[1:].split("g")
    return int(bits), int(gs)


def applies(W: int, gs: int) -> bool:
    """The tiles take a chunk of W lanes from one group: every group a whole number of chunks."""
    return gs % W == 0


def _bytes(name: str, row: str, c: int, W: int, bits: int) -> list[str]:
    """%name = the W codes of chunk c (dims c·W ..) as <W x i8>, one code a lane, in dim order."""
    per = 8 // bits  # codes a byte
    n = W // per  # bytes the chunk spans
    L = [f"  {name}.a = add i64 {row}, {c * n}", f"  {name}.p = inttoptr i64 {name}.a to ptr",
         f"  {name}.b = load <{n} x i8>, ptr {name}.p, align 1"]  # fmt: skip
    if per == 1:
        return [*L[:-1], f"  {name} = load <{n} x i8>, ptr {name}.p, align 1"]
    mask = (1 << bits) - 1
    parts = []
    for j in range(per):  # part j: code j of every byte (bits j·bits .. of each)
        p = f"{name}.s{j}"
        shifted = f"{name}.b" if j == 0 else f"{name}.r{j}"
        if j:
            L.append(f"  {shifted} = lshr <{n} x i8> {name}.b, splat (i8 {j * bits})")
        L.append(f"  {p} = and <{n} x i8> {shifted}, splat (i8 {mask})")
        parts.append(p)
    while len(parts) > 1:  # concatenate pairs: the vector holds part 0's n codes, then part 1's, ...
        nxt = []
        width = n * (per // len(parts))  # lanes of one vector at this level
        for a in range(0, len(parts), 2):
            cat = f"{parts[a]}c"
            idx = ", ".join(f"i32 {i}" for i in range(2 * width))
            pair = f"<{width} x i8> {parts[a]}, <{width} x i8> {parts[a + 1]}"
            L.append(f"  {cat} = shufflevector {pair}, <{2 * width} x i32> <{idx}>")
            nxt.append(cat)
        parts = nxt
    order = ", ".join(f"i32 {(d % per) * n + d // per}" for d in range(W))  # dim d is code d % per of byte d // per
    L.append(f"  {name} = shufflevector <{W} x i8> {parts[0]}, <{W} x i8> poison, <{W} x i32> <{order}>")
    return L


def chunk(name: str, row: str, key: str, c: int, W: int, kv: str) -> list[str]:
    """%name = dims c·W .. c·W+W-1 of the code row at address ``row`` (position ``key`` of the call, whose scales
    and biases are at %sc + key·%scs and %bi + key·%bis) as floats: scale · code + bias, the module's contract."""
    bits, gs = parse(kv)
    group = c * W // gs
    v = f"<{W} x float>"
    L = _bytes(f"{name}.c", row, c, W, bits)
    L.append(f"  {name}.f = uitofp <{W} x i8> {name}.c to {v}")
    for side in ("sc", "bi"):
        L += [f"  {name}.{side}o = mul i64 {key}, %{side}s", f"  {name}.{side}a0 = add i64 %{side}, {name}.{side}o",
              f"  {name}.{side}a = add i64 {name}.{side}a0, {4 * group}",
              f"  {name}.{side}p = inttoptr i64 {name}.{side}a to ptr",
              f"  {name}.{side}x = load float, ptr {name}.{side}p, align 4",
              *_splat(f"{name}.{side}v", f"{name}.{side}x", W)]  # fmt: skip
    return [*L, f"  {name}.m = fmul {v} {name}.f, {name}.scv", f"  {name} = fadd {v} {name}.m, {name}.biv"]


if HAVE_NUMBA:
    import numpy as np
    from numba import njit

    # No fastmath: the module's contract is two float32 roundings per value, as the IR's fmul and fadd round.
    @njit(cache=True)
    def _dequantize(codes, scales, biases, r, g, at, n, dst, t):  # pragma: no cover - compiled
        """Positions at .. at+n-1 of head g of a quantized cache row r into dst[t .. t+n-1] as float32:
        ``scale * code + bias`` per group. ``codes`` is the uint32 codes' byte view (``_contiguous``): on a
        little-endian CPU code d of an 8-bit row is byte d, of a 4-bit row the low (even d) or high nibble of byte
        d/2, of a 2-bit row bits 2(d%4) of byte d/4. A 4- or 2-bit row is first spread into one byte a code, then
        the same arithmetic runs over contiguous bytes, a group at a time with the width fixed, so it vectorises
        (writing the float pairs of each 4-bit byte in place measured 5x slower, 6.7 against 1.4 µs a tile of 64
        positions of 128 dims; a loop over packed words with a variable shift 3x)."""
        D = dst.shape[1]
        bits = 8 * codes.shape[3] // D
        ng = scales.shape[3]
        gs = D // ng
        spread = np.empty(D, np.uint8)
        for i in range(n):
            row = codes[r, g, at + i]
            if bits == 4:
                for e in range(D // 2):
                    byte = row[e]
                    spread[2 * e] = byte & np.uint8(15)
                    spread[2 * e + 1] = byte >> np.uint8(4)
            elif bits == 2:
                for e in range(D // 4):
                    byte = row[e]
                    for j in range(4):
                        spread[4 * e + j] = (byte >> np.uint8(2 * j)) & np.uint8(3)
            out = dst[t + i]
            for grp in range(ng):
                sc, bi = scales[r, g, at + i, grp], biases[r, g, at + i, grp]
                lo = grp * gs
                if bits == 8:  # the row read in place (through one variable with ``spread``: ~8 % slower)
                    for d in range(gs):
                        out[lo + d] = sc * np.float32(row[lo + d]) + bi
                else:
                    for d in range(gs):
                        out[lo + d] = sc * np.float32(spread[lo + d]) + bi
