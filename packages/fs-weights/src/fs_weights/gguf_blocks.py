"""llama.cpp's quantized block formats, rewritten exactly as MLX affine parts: codes, ``scales``, ``biases``.

Every GGUF type that loads is, per group of G consecutive weights, ``w = scale·q + bias`` with a small unsigned
code ``q``; only where the scale, the bias and the code bits live inside a block differs. So each becomes MLX's
affine layout (``.weight`` uint32 codes, ``.scales`` / ``.biases`` float32 ``[rows, cols/G]``) and runs on fs's
quantized kernels as it is, with no second rounding:

    type  block (bytes)                           G   kept as  scale   bias        from the file's w
    Q8_0  d, 32 int8 q                     (34)  32   8-bit    d       -128d       d·q
    Q4_0  d, 32 nibbles                    (18)  32   4-bit    d       -8d         d·(q-8)
    Q4_1  d, m, 32 nibbles                 (20)  32   4-bit    d       m           d·q + m
    Q5_0  d, 32 high bits, 32 nibbles      (22)  32   8-bit    d       -16d        d·(q-16)
    Q5_1  d, m, high bits, nibbles         (24)  32   8-bit    d       m           d·q + m
    Q4_K  d, dmin, 8×(6-bit sc, mn), 256 nibbles (144)      32   4-bit  d·sc  -dmin·mn  d·sc·q - dmin·mn
    Q5_K  Q4_K's head, 256 high bits, 256 nibbles (176)     32   8-bit  d·sc  -dmin·mn  d·sc·q - dmin·mn
    Q6_K  256 nibbles, 256×2 high bits, 16 int8 sc, d (210) 16   8-bit  d·sc  -32·d·sc  d·sc·(q-32)

Why exact: ``d`` is float16 (11 significant bits), ``sc`` at most 8, ``q`` at most 6, so ``scale·q`` needs at
most 24 bits and is exact in float32; the bias is exact too (a power of two times ``d``, or ``d·mn`` as gguf
computes it), so ``scale·q + bias`` rounds once, to the float32 that gguf's own dequantizer computes. Only a zero's
sign can differ (``s·q + b`` cannot make -0.0). The 5- and 6-bit codes take a byte each (the 8-bit kernels); a
packed 5/6-bit kernel is not written yet (docs/decisions.md). Scales and biases are float32: ``-128d`` overflows
float16 once ``|d| > 511.75`` and ``d·sc`` needs up to 18 bits.

Super-block records: a K-quant's per-group scale and bias are products of a per-256-weights factor and a small
per-group integer, so the kernels can read those instead of float32 pairs per group (Q4_K: 0.59 instead of 0.75
bytes per weight; Q6_K: 1.08 instead of 1.5). One record per super-block, in ``superblock_records``:

    layout  types        record (bytes)                                  scale_g    bias_g
    k4      Q4_K, Q5_K   d f32, m f32, 8 × int8 sc, 8 × int8 mn    (24)  d·sc_g     -(m·mn_g)
    k6      Q6_K         d f32, 16 × int8 sc                       (20)  d·sc_g     (d·sc_g)·-32

``expand_records`` computes exactly those products: it is how ``affine_part`` makes the float32 ``.scales`` and
``.biases`` of these types, and what a kernel reading the records must do in the same order (same bits).
"""

from typing import Any

import numpy as np

# ggml type -> (bits the codes are kept in, group size)
FORMATS = {
    "Q8_0": (8, 32),
    "Q4_0": (4, 32),
    "Q4_1": (4, 32),
    "Q4_K": (4, 32),
    "Q5_0": (8, 32),
    "Q5_1": (8, 32),
    "Q5_K": (8, 32),
    "Q6_K": (8, 16),
}
CODE_BITS = {"Q5_0": 5, "Q5_1": 5, "Q5_K": 5, "Q6_K": 6}  # the types whose 8-bit codes above fit fewer bits
BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}
ROWS = 4096  # rows converted at a time: a 151936-row embedding never has whole-matrix temporaries


def quantization(kept: dict[str, tuple[int, int]]) -> dict[str, Any] | None:
    """config.json's ``quantization`` for a file's quantized tensors (base name -> (bits, group)): the commonest
    at the top, MLX's per-module entries for the others (a Q4_K_M file: 4-bit group 32, its Q6_K tensors 8-bit
    group 16)."""
    if not kept:
        return None
    kinds = list(kept.values())
    bits, group = max(set(kinds), key=kinds.count)
    return {"group_size": group, "bits": bits} | {
        base: {"group_size": g, "bits": b} for base, (b, g) in kept.items() if (b, g) != (bits, group)
    }


def affine_part(kind: str, data: np.ndarray, shape: tuple[int, int], part: str) -> np.ndarray:
    """One MLX part ("weight", "scales" or "biases") of a ``kind`` tensor whose stored bytes are ``data``."""
    rows, cols = shape
    blocks = data.reshape(rows, -1, BLOCK_BYTES[kind])
    bits, _ = FORMATS[kind]
    chunks = []
    for a in range(0, rows, ROWS):
        b = blocks[a : a + ROWS]
        if part == "weight":
            codes = _CODES[kind](b).reshape(b.shape[0], cols)
            chunks.append(_pack(codes, bits))
        else:
            scale, bias = _SCALES[kind](b)
            chunks.append((scale if part == "scales" else bias).reshape(b.shape[0], -1))
    return np.concatenate(chunks) if len(chunks) != 1 else chunks[0]


# K-quant type -> its super-block record layout; layout -> (record bytes, groups per super-block of 256 weights)
SUPERBLOCKS = {"Q4_K": "k4", "Q5_K": "k4", "Q6_K": "k6"}
RECORDS = {"k4": (24, 8), "k6": (20, 16)}


def superblock_records(kind: str, data: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The super-block records (module docstring) of a ``kind`` tensor whose stored bytes are ``data``:
    uint8 [rows, cols/256 · record bytes]."""
    rows, _ = shape
    blocks = data.reshape(rows, -1, BLOCK_BYTES[kind])
    return np.concatenate([_records(kind, blocks[a : a + ROWS]) for a in range(0, rows, ROWS)]).reshape(rows, -1)


def expand_records(layout: str, records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(scales, biases) float32 [rows, groups] from records uint8 [rows, super-blocks · R] (or [..., R])."""
    R, per = RECORDS[layout]
    r = records.reshape(records.shape[0], -1, R)
    d = r[..., 0:4].copy().view(np.float32)  # [rows, super-blocks, 1]
    at = 8 if layout == "k4" else 4
    scale = d * r[..., at : at + per].view(np.int8).astype(np.float32)
    if layout == "k4":
        bias = -(r[..., 4:8].copy().view(np.float32) * r[..., 16:24].view(np.int8).astype(np.float32))
    else:
        bias = scale * np.float32(-32)
    return scale.reshape(r.shape[0], -1), bias.reshape(r.shape[0], -1)


def _records(kind: str, b: np.ndarray) -> np.ndarray:
    """Blocks [rows, super-blocks, bytes] -> records [rows, super-blocks, R]; 6-bit sc and mn (< 64) fit int8."""
    R, _ = RECORDS[SUPERBLOCKS[kind]]
    rec = np.empty((*b.shape[:2], R), np.uint8)
    if kind == "Q6_K":
        rec[..., 0:4] = _f16(b, 208)[..., None].view(np.uint8)
        rec[..., 4:20] = b[..., 192:208]
        return rec
    sc, mn = _k_scales(b)
    rec[..., 0:4] = _f16(b, 0)[..., None].view(np.uint8)
    rec[..., 4:8] = _f16(b, 2)[..., None].view(np.uint8)
    rec[..., 8:16], rec[..., 16:24] = sc, mn
    return rec


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes in element order -> MLX's uint32 packing (least significant first: 8-bit is the bytes themselves)."""
    if bits == 8:
        return np.ascontiguousarray(codes, dtype=np.uint8).view("<u4")
    return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4), dtype=np.uint8).view("<u4")


def _f16(b: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte ``at`` of every block, as float32 ``[rows, blocks]``."""
    return b[..., at : at + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """Q4_0 / Q4_1 / Q5_0 / Q5_1: byte j holds element j (low nibble) and element j+16 (high) of a block of 32."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _high_bits(b: np.ndarray, at: int) -> np.ndarray:
    """Q5_0 / Q5_1: the little-endian uint32 at ``at`` holds bit 4 of element j in bit j."""
    qh = b[..., at : at + 4].copy().view("<u4")  # [rows, blocks, 1]
    return ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)


def _k_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K bytes 4..15: eight 6-bit scales and eight 6-bit mins, the high bits of 4-7 packed apart."""
    s = b[..., 4:16]
    lo, mid, hi = s[..., 0:4], s[..., 4:8], s[..., 8:12]  # sc 0-3 | mn 0-3 | the high bits of 4-7
    sc = np.concatenate([lo & 0x3F, (hi & 0x0F) | ((lo >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([mid & 0x3F, (hi >> 4) | ((mid >> 2) & 0x30)], axis=-1)
    return sc, mn


def _k_affine(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return expand_records("k4", _records("Q4_K", b))  # as gguf: d·sc, then dmin·mn


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """Q4_K / Q5_K: four chunks of 32 bytes, sub-block 2c in chunk c's low nibbles and 2c+1 in its high ones."""
    q = qs.reshape(*qs.shape[:2], 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(2, 1)
    return (q & 0x0F).reshape(*qs.shape[:2], 8, 32)


def _q5_k_codes(b: np.ndarray) -> np.ndarray:
    high = (b[..., 16:48].reshape(*b.shape[:2], 1, 32) >> np.arange(8, dtype=np.uint8).reshape(8, 1)) & 1
    return _k_nibbles(b[..., 48:]) | (high << 4)  # sub-block i's bit 4 in bit i of the 32 high-bit bytes


def _q6_k_codes(b: np.ndarray) -> np.ndarray:
    """Two halves of 128: 64 nibble bytes (low nibbles: rows 0-63, high: 64-127) and 32 bytes of four 2-bit
    high parts each (shift 0, 2, 4, 6 for the four runs of 32)."""
    n = b.shape[:2]
    lo = (b[..., :128].reshape(*n, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(2, 1)) & 0x0F
    hi = (b[..., 128:192].reshape(*n, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)) & 0x03
    return lo.reshape(*n, 8, 32) | (hi.reshape(*n, 8, 32) << 4)


def _q6_k_affine(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return expand_records("k6", _records("Q6_K", b))  # as gguf: d·sc


_CODES = {
    "Q8_0": lambda b: b[..., 2:] ^ np.uint8(0x80),  # int8 q -> q+128: flip the sign bit
    "Q4_0": lambda b: _nibbles(b[..., 2:]),
    "Q4_1": lambda b: _nibbles(b[..., 4:]),
    "Q5_0": lambda b: _nibbles(b[..., 6:]) | (_high_bits(b, 2) << 4),
    "Q5_1": lambda b: _nibbles(b[..., 8:]) | (_high_bits(b, 4) << 4),
    "Q4_K": lambda b: _k_nibbles(b[..., 16:]),
    "Q5_K": _q5_k_codes,
    "Q6_K": _q6_k_codes,
}
_SCALES = {
    "Q8_0": lambda b: (_f16(b, 0), _f16(b, 0) * np.float32(-128)),
    "Q4_0": lambda b: (_f16(b, 0), _f16(b, 0) * np.float32(-8)),
    "Q4_1": lambda b: (_f16(b, 0), _f16(b, 2)),
    "Q5_0": lambda b: (_f16(b, 0), _f16(b, 0) * np.float32(-16)),
    "Q5_1": lambda b: (_f16(b, 0), _f16(b, 2)),
    "Q4_K": _k_affine,
    "Q5_K": _k_affine,
    "Q6_K": _q6_k_affine,
}
