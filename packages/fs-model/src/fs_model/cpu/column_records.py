"""A GGUF K-quant matrix's super-block records laid out per 16 rows, for the column tiles (column_tiles.py).

Why: the column tiles put 16 output rows in a vector's lanes, so a group's 16 scales are one load - from float32
scales that is 8 bytes per group of every row (Q4_K: 0.75 bytes a weight with the 0.5 of the codes; Q6_K 1.25
where its codes are 0.75), where the file's records hold the same numbers in 24 bytes per 256 weights (Q4_K, Q5_K)
or 20 (Q6_K). A decode step streams every weight once, so those bytes are its time; prefill reads them once per
group of M rows either way. The records are turned so that a group's 16 rows of one record field are adjacent:
then a group's scales are one 16-byte load, a widening, a product - the same products as
``fs_weights.gguf_blocks.expand_records``, each exact in float32 (an 11-bit factor times a 6- or 8-bit integer), so
a tile reading these has the bits of the same tile reading the expanded scales and ``FS_SUPERBLOCK_SCALES`` moves
no bit.

Layout (``arrange``), per block of 16 rows, per super-block of 256 inputs (16 records):

    k4 (Q4_K, Q5_K; 384 bytes):  d f32 [16] | m f32 [16] | sc int8 [8 groups][16 rows] | mn int8 [8][16]
    k6 (Q6_K; 320 bytes):        d f32 [16] | sc int8 [16 groups][16 rows]

kept as ``[n, k/256 · R]`` uint8 (a block's first row i starts at i · row stride, like column_tiles' scales).
Group g of the block's rows: super-block g // per, slot g % per; scale = d · sc, bias = -(m · mn) (k4) or
scale · -32 (k6), lane by lane.
"""

import numpy as np

from fs_weights.gguf_blocks import RECORDS

from .column_tiles import COLUMNS
from .superblock_scales import products

LAYOUTS = ("k4", "k6")  # the record layouts (gguf_blocks.RECORDS) the column tiles read
# per layout: (offset in a record, bytes) of each field, in the order the arranged block holds them
FIELDS = {"k4": ((0, 4), (4, 4), (8, 8), (16, 8)), "k6": ((0, 4), (4, 16))}


def arrange(records: np.ndarray, layout: str) -> np.ndarray:
    """Row-major records uint8 [n, k/256 · R] (gguf_blocks.superblock_records) -> the layout above."""
    R, n = RECORDS[layout][0], records.shape[0]
    r = records.reshape(n // COLUMNS, COLUMNS, -1, R).transpose(0, 2, 1, 3)  # [block, super-block, row, R]
    parts = [
        r[..., at : at + size] if size == 4 else r[..., at : at + size].transpose(0, 1, 3, 2)  # floats stay whole
        for at, size in FIELDS[layout]
    ]
    flat = [np.ascontiguousarray(p).reshape(*r.shape[:2], -1) for p in parts]
    return np.ascontiguousarray(np.concatenate(flat, axis=2)).reshape(n, -1)


def planar(records: np.ndarray, layout: str) -> np.ndarray:
    """Inverse of ``arrange``."""
    R, n = RECORDS[layout][0], records.shape[0]
    c = records.reshape(n // COLUMNS, -1, COLUMNS * R)  # [block, super-block, 16 · R]
    out = np.empty((*c.shape[:2], COLUMNS, R), np.uint8)
    at = 0
    for field, size in FIELDS[layout]:
        part = c[..., at : at + COLUMNS * size]
        if size == 4:
            out[..., field : field + size] = part.reshape(*c.shape[:2], COLUMNS, size)
        else:
            out[..., field : field + size] = part.reshape(*c.shape[:2], size, COLUMNS).transpose(0, 1, 3, 2)
        at += COLUMNS * size
    return np.ascontiguousarray(out.transpose(0, 2, 1, 3)).reshape(n, -1)


def scales_and_biases(s: str, b: str, base: str, g: str, W: int, h: int, layout: str) -> list[str]:
    """IR defining ``s`` and ``b`` as <W x float>: rows W·h.. (of the 16) of group ``g`` (an i64 value), from the
    block's arranged ``layout`` records at address ``base`` (an i64 value) - the module's contract, lane by lane."""
    V = f"<{W} x float>"
    R, per = RECORDS[layout]
    ints_at = 128 if layout == "k4" else 64  # where the sub-scales start in a block's super-block

    def load(name: str, offset: str, ty: str) -> list[str]:
        return [
            f"  {name}.a = add i64 {s}.r, {offset}",
            f"  {name}.p = inttoptr i64 {name}.a to ptr",
            f"  {name} = load {ty}, ptr {name}.p, align 1",
        ]

    def ints(name: str, field: int) -> list[str]:  # the slot's W int8 of the field at ``field``, as floats
        return [
            f"  {name}.o = add i64 {s}.j16, {field + W * h}",
            *load(f"{name}.i", f"{name}.o", f"<{W} x i8>"),
            f"  {name} = sitofp <{W} x i8> {name}.i to {V}",
        ]

    L = [
        f"  {s}.sb = lshr i64 {g}, {per.bit_length() - 1}",
        f"  {s}.j = and i64 {g}, {per - 1}",
        f"  {s}.j16 = shl i64 {s}.j, 4",
        f"  {s}.ro = mul i64 {s}.sb, {COLUMNS * R}",
        f"  {s}.r = add i64 {base}, {s}.ro",
        *load(f"{s}.d", str(4 * W * h), V),
        *ints(f"{s}.c", ints_at),
    ]
    mn = [*load(f"{b}.m", str(64 + 4 * W * h), V), *ints(f"{b}.n", ints_at + COLUMNS * per)]
    return L + products(s, b, V, layout, mn)
