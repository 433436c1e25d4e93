"""GGUF's 5- and 6-bit codes (Q5_0, Q5_1, Q5_K; Q6_K) with 16 output columns in the lanes: ``q5ic`` / ``q6ic``.

Why: the packed tiles (packed_codes.py) put one output's 64 weights in a register, so each ``vpdpbusd`` of every
(weight row, input row) pair is followed by its own conversion, scale product, spread and FMAs - the limit
column_tiles.py removed for 4-bit codes (Q6_K prefill ran at 0.4-0.6× llama.cpp). Here the 4-bit layout of
``q4ic`` carries the codes' low nibbles, and each group's top bits follow in registers of the same shape, so a
chunk of 4 inputs of 16 outputs is ``nibbles | top bits << 4``: two or three byte operations shared by every input
row of the tile, then the ``vpdpbusd`` (or the AVX2 pair) and the float work of column_tiles.py, once per group.

Layout (``arrange``), per block of 16 rows, per group of G inputs (Q6_K: 16, Q5_*: 32), 16·G·bits/8 bytes:

    G/8 pairs of 64 bytes      the low nibbles exactly as q4ic's (chunk 2p: the pair's low nibbles, 2p+1: high)
    6-bit: G/16 × 64 bytes     byte 4l + j of register t: bits 2q, 2q+1 = the top 2 bits of chunk 4t + q's byte 4l + j
    5-bit: G/32 × 64 bytes     byte 4l + j of register t: bit q = the top bit of chunk 8t + q's byte 4l + j

(chunk c's byte 4l + j: row l's input 4c + j of the group). The AVX2 body reads each register as two 32-byte halves
of 8 rows, as q4ic's does. The contract is column_tiles.py's, per output element.
"""

import numpy as np

from . import HAVE_NUMBA
from .column_tiles import COLUMNS
from .packed_codes import BLOCK, GROUP, pack

TOP = {6: 16, 5: 32}  # inputs a 64-byte register of top bits covers


def group_bytes(bits: int, G: int) -> int:
    return COLUMNS * G * bits // 8


def arrange(packed: np.ndarray, bits: int) -> np.ndarray:
    """Packed codes [n, k/64 · 8·bits] (packed_codes.pack) -> the layout above, the same bytes. One compiled pass a
    block of 16 rows at a time (as column_tiles.arrange)."""
    if not HAVE_NUMBA:  # pragma: no cover - the tiles need numba: the column kinds are never chosen without it
        raise RuntimeError("the column layout is made by a compiled kernel: install numba (fs-model[fast])")
    out = np.empty_like(packed)
    _arrange(np.ascontiguousarray(packed), bits, GROUP[bits], out)
    return out


def planar(columns: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of ``arrange`` (the dequantizing oracle, an embedding's rows)."""
    G, n = GROUP[bits], columns.shape[0]
    k = columns.shape[1] * 8 // bits
    g = columns.reshape(n // COLUMNS, k // G, -1)  # [block, group, bytes]
    nib = g[..., : 8 * G].reshape(n // COLUMNS, k // G, G // 8, COLUMNS, 4)  # [.., pair, lane, j]
    lo, hi = nib & 15, nib >> 4
    chunks = np.stack([lo, hi], axis=3).reshape(n // COLUMNS, k // G, G // 4, COLUMNS, 4)  # [.., chunk, lane, j]
    top = g[..., 8 * G :].reshape(n // COLUMNS, k // G, -1, COLUMNS, 4)  # [.., register, lane, j]
    per = TOP[bits] // 4  # chunks a top register covers
    width = 8 // per  # bits a chunk's code keeps there
    tops = np.stack([(top >> (width * q)) & ((1 << width) - 1) for q in range(per)], axis=3)
    codes = chunks | (tops.reshape(chunks.shape) << 4)
    codes = codes.transpose(0, 3, 1, 2, 4).reshape(n, k)  # [block, lane, group, chunk, j] -> rows
    return pack(np.ascontiguousarray(codes), bits)


if HAVE_NUMBA:
    from numba import njit

    @njit(cache=True)
    def _arrange(packed, bits, G, out):  # pragma: no cover - compiled
        """``arrange``: each block's 16 rows unpacked (packed_codes' layout: per 64 weights 32 bytes of nibbles,
        c[j] low and c[j + 32] high, then the top bits) into a code a byte, then written per group as above."""
        n, rb = packed.shape
        k = rb * 8 // bits
        per = 4 if bits == 6 else 8  # chunks a top register covers (TOP / 4)
        width = 8 // per
        gb = COLUMNS * G * bits // 8
        codes = np.empty((COLUMNS, k), np.uint8)
        flat = out.reshape(-1)
        for b in range(n // COLUMNS):
            for lane in range(COLUMNS):
                row = packed[b * COLUMNS + lane]
                for c in range(k // BLOCK):
                    at = c * BLOCK * bits // 8
                    for j in range(32):
                        codes[lane, c * BLOCK + j] = row[at + j] & 15
                        codes[lane, c * BLOCK + 32 + j] = row[at + j] >> 4
                    if bits == 6:
                        for j in range(16):
                            t = row[at + 32 + j]
                            for q in range(4):
                                codes[lane, c * BLOCK + 16 * q + j] |= ((t >> (2 * q)) & 3) << 4
                    else:
                        for i in range(BLOCK):
                            codes[lane, c * BLOCK + i] |= ((row[at + 32 + i // 8] >> (i % 8)) & 1) << 4
            base = b * COLUMNS * rb
            for g in range(k // G):
                at = base + g * gb
                for p in range(G // 8):
                    for lane in range(COLUMNS):
                        for j in range(4):
                            x = g * G + 8 * p + j
                            flat[at + (p * COLUMNS + lane) * 4 + j] = (codes[lane, x] & 15) | (
                                (codes[lane, x + 4] & 15) << 4
                            )
                for t in range(G // (4 * per)):
                    for lane in range(COLUMNS):
                        for j in range(4):
                            v = 0
                            for q in range(per):
                                v |= (codes[lane, g * G + 4 * (per * t + q) + j] >> 4) << (width * q)
                            flat[at + 8 * G + (t * COLUMNS + lane) * 4 + j] = v


def chunks(G: int, bits: int, W: int) -> tuple[list[str], list[list[str]]]:
    """IR building a group's G/4 chunks of 4 inputs × 16 rows from the codes at %wg (column_tiles.microkernel's
    group address): per chunk, its name(s) - W = 16: one <16 x i32>; W = 8: two <32 x i8>, rows 0-7 and 8-15."""
    per = TOP[bits] // 4  # chunks a top register covers
    width = 8 // per
    L: list[str] = []
    names: list[list[str]] = []
    halves = [(64, "")] if W == 16 else [(32, "_0"), (32, "_1")]
    for c in range(G // 4):
        p, h, t, q = c // 2, c % 2, c // per, c % per
        row = []
        for i, (size, sfx) in enumerate(halves):
            v = f"<{size} x i8>"
            nib, top, name = f"%nb{p}{sfx}", f"%tp{t}{sfx}", f"%ch{c}{sfx}"
            if h == 0:
                L += _load(nib, f"{64 * p + 32 * i}", v)
            if q == 0:
                L += _load(top, f"{8 * G + 64 * t + 32 * i}", v)
            low = f"and {v} {nib}, splat (i8 15)" if h == 0 else f"lshr {v} {nib}, splat (i8 4)"
            shift = 4 - width * q  # the chunk's top bits to bits 4..
            moved = (
                f"shl {v} {top}, splat (i8 {shift})"
                if shift > 0
                else f"lshr {v} {top}, splat (i8 {-shift})"
                if shift < 0
                else None
            )
            mask = ((1 << width) - 1) << 4
            L.append(f"  {name}.l = {low}")
            if moved is not None:
                L.append(f"  {name}.s = {moved}")
            L.append(f"  {name}.t = and {v} {name + '.s' if moved is not None else top}, splat (i8 {mask})")
            if W == 16:
                L += [f"  {name}.c = or {v} {name}.l, {name}.t", f"  {name} = bitcast {v} {name}.c to <16 x i32>"]
            else:
                L.append(f"  {name} = or {v} {name}.l, {name}.t")
            row.append(name)
        names.append(row)
    return L, names


def _load(name: str, offset: str, ty: str) -> list[str]:
    return [
        f"  {name}.a = add i64 %wg, {offset}",
        f"  {name}.p = inttoptr i64 {name}.a to ptr",
        f"  {name} = load {ty}, ptr {name}.p, align 1",
    ]
