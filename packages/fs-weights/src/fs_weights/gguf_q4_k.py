"""Float weights written as llama.cpp's Q4_K blocks (what ``fs-convert-gguf --outtype q4_k`` writes).

Why here: the ``gguf`` package dequantizes K-quants but cannot make them, and Q4_K is the type Qwen3 users run.

A row is cut into super-blocks of 256 weights, each into 8 sub-blocks of 32; a weight is ``d·sc_j·q − dmin·mn_j``
with a 4-bit code ``q``, 6-bit ``sc_j`` and ``mn_j`` per sub-block and float16 ``d``, ``dmin`` per super-block
(``gguf_blocks`` reads the same 144 bytes: d, dmin, 12 bytes of packed sc/mn, 128 of nibbles). The choice per
sub-block is llama.cpp's first guess without its search (``make_qkx2_quants`` then tries 20 nearby scales and keeps
the least squared error): the range [min(x, 0), max(x)] in 15 steps,

    s_j = (max_j − min_j) / 15,  m_j = −min_j      d = max_j s_j / 63,  dmin = max_j m_j / 63
    sc_j = round(s_j / d),  mn_j = round(m_j / dmin),  q = clip(round((x + dmin·mn_j) / (d·sc_j)), 0, 15)

with the codes rounded against the *stored* (rounded) scales, so a code is the nearest for the value it decodes to.
Error per weight at most half a step of its sub-block plus what rounding sc/mn to 6 bits moves (tests bound it).

    q4_k_blocks(x [rows, cols] float32, cols % 256 == 0) -> uint8 [rows, cols / 256 · 144]
"""

import numpy as np

QK = 256  # weights per super-block
BLOCK = 144  # bytes per super-block


def q4_k_blocks(x: np.ndarray) -> np.ndarray:
    """Q4_K block bytes of ``x`` (see the module docstring), a few thousand rows at a time."""
    rows, cols = x.shape
    if cols % QK:
        raise ValueError(f"Q4_K stores rows of whole super-blocks of {QK} weights; this matrix has {cols} columns")
    out = np.empty((rows, cols // QK * BLOCK), np.uint8)
    for a in range(0, rows, 4096):
        part = np.asarray(x[a : a + 4096], np.float32)
        out[a : a + 4096] = _blocks(part.reshape(-1, 8, 32)).reshape(part.shape[0], -1)  # [super-blocks, 8, 32]
    return out


def _blocks(x: np.ndarray) -> np.ndarray:
    lo = np.minimum(x.min(axis=2), 0)  # the offset is -dmin·mn <= 0: a sub-block's range always includes 0
    s, m = (x.max(axis=2) - lo) / np.float32(15), -lo
    d, dmin = _f16(s.max(axis=1) / np.float32(63)), _f16(m.max(axis=1) / np.float32(63))
    sc, mn = _six_bits(s, d), _six_bits(m, dmin)
    scale = d.astype(np.float32)[:, None] * sc  # what a reader computes (gguf_blocks: d·sc, dmin·mn)
    offset = dmin.astype(np.float32)[:, None] * mn
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint((x + offset[..., None]) / scale[..., None])
    q = np.clip(np.nan_to_num(q, nan=0.0), 0, 15).astype(np.uint8)  # a zero scale: every code 0
    block = np.empty((x.shape[0], BLOCK), np.uint8)
    block[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    block[:, 2:4] = dmin.view(np.uint8).reshape(-1, 2)
    block[:, 4:16] = _pack_scales(sc, mn)
    pairs = q.reshape(-1, 4, 2, 32)  # chunk c holds sub-block 2c in its low nibbles, 2c+1 in its high ones
    block[:, 16:] = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(-1, 128)
    return block


def _f16(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, np.float32).astype(np.float16)


def _six_bits(v: np.ndarray, step: np.ndarray) -> np.ndarray:
    """round(v / step) in 0..63 as float32 (a zero step: 0)."""
    f = step.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(f > 0, np.rint(v / f), 0)
    return np.clip(r, 0, 63).astype(np.float32)


def _pack_scales(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins in 12 bytes: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7
    (mins); 4-7 with their low 4 bits in bytes 8-11 and their top 2 bits in the top bits of bytes 0-7."""
    s, n = sc.astype(np.uint8), mn.astype(np.uint8)
    out = np.empty((s.shape[0], 12), np.uint8)
    out[:, 0:4] = s[:, :4] | ((s[:, 4:] >> 4) << 6)
    out[:, 4:8] = n[:, :4] | ((n[:, 4:] >> 4) << 6)
    out[:, 8:12] = (s[:, 4:] & 0x0F) | ((n[:, 4:] & 0x0F) << 4)
    return out
