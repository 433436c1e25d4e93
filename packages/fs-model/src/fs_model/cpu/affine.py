"""Affine-quantized weights kept quantized in memory: w = scale·q + bias per group of G inputs (MLX's format).

``x · w_row = Σ_g scale_g·(q_g · x_g) + bias_g·Σ x_g``, so a kernel reads 1 (or ½) byte per weight plus the
per-group scale and bias. MLX 8-bit packs four codes per uint32, least significant first, which is exactly the
uint8 byte order: the packed tensor *viewed as uint8* is the code matrix, with no copy. MLX 4-bit packs weights
2j and 2j+1 into byte j, which makes the kernel's inner loop shuffle nibbles; fs repacks 4-bit codes at load into
a *planar* layout instead: for each pair of groups (2G weights in G bytes) byte j holds weight j in its low
nibble and weight G+j in its high nibble (an odd last group: weight j and G/2+j), so both nibble planes are
contiguous vectors (measured 1.7× faster, docs/performance.md). ``quantize_affine`` makes the same formats from
float weights (``quantize="int8"|"int4"``). ``AffineLinear`` is the layer that multiplies them.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from fs_weights import bf16_to_f32, dequantize, f32_to_bf16, quantize
from fs_weights.gguf_blocks import expand_records

from ..numpy.linear import Linear
from . import HAVE_NUMBA, SWITCHES, bf16_gemm, column_records, column_tiles, packed_codes, packed_columns, tiles, vnni
from .blas import SMALL, blocked_matmul, scratch
from .threads import bucket, fan_out


def _planar(e: np.ndarray, G: int) -> np.ndarray:
    """codes [n, k] (one per byte, < 16) -> planar nibbles [n, k/2]."""
    n, k = e.shape
    paired = k // (2 * G) * 2 * G
    pairs = e[:, :paired].reshape(n, -1, 2, G)
    parts = [(pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, -1)]
    if paired < k:
        tail = e[:, paired:].reshape(n, 2, G // 2)
        parts.append(tail[:, 0] | (tail[:, 1] << 4))
    return np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.uint8)


def _unplanar(p: np.ndarray, G: int) -> np.ndarray:
    """Inverse of ``_planar``: planar nibbles [n, k/2] -> codes [n, k]."""
    n, half = p.shape
    paired = 2 * half // (2 * G) * 2 * G
    lo, hi = p & 15, p >> 4
    parts = [
        np.stack([lo[:, : paired // 2].reshape(n, -1, G), hi[:, : paired // 2].reshape(n, -1, G)], axis=2).reshape(
            n, paired
        )
    ]
    if paired < 2 * half:
        parts += [lo[:, paired // 2 :], hi[:, paired // 2 :]]
    return np.concatenate(parts, axis=1)


@dataclass(frozen=True)
class AffineWeight:
    codes: np.ndarray  # uint8 [out, in] (8-bit), [out, in/2] (4-bit, planar nibbles: the module docstring) or
    # [out, in·bits/8] (5-/6-bit: GGUF's Q5_*, Q6_K packed, packed_codes.py; only where the tiles run them)
    scales: np.ndarray  # float32 [out, in/G], or 16-bit: bf16 bits (uint16) or float16 (half_scales.py)
    biases: np.ndarray  # the same dtype and shape as scales
    bits: int
    group_size: int
    # a GGUF K-quant's (layout, super-block records): what the tiles read instead of scales / biases (tiles.Tiled)
    records: tuple[str, np.ndarray] | None = None
    # 4-bit codes, scales, biases (and records) laid out per 16 rows for the q4ic tiles (column_tiles.py,
    # column_records.py), not planar per row
    columns: bool = False
    # scales and biases held only by the records (``records_only``): ``scales`` / ``biases`` are zero-stride
    # placeholders of their shape, and whoever needs the floats (rows, dequantize) expands the records
    lazy: bool = False

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape[0], self.scales.shape[1] * self.group_size

    @property
    def nbytes(self) -> int:
        parts = 0 if self.lazy else self.scales.nbytes + self.biases.nbytes
        return self.codes.nbytes + parts + (self.records[1].nbytes if self.records else 0)

    def float_scales(self) -> tuple[np.ndarray, np.ndarray]:
        """(scales, biases) as float32 (16-bit ones widened: exact; a ``lazy`` weight's expanded from its records,
        in this weight's layout)."""
        if self.lazy and self.records is not None:
            layout, rec = self.records
            scales, biases = expand_records(layout, column_records.planar(rec, layout) if self.columns else rec)
            if self.columns:
                return column_tiles.columns(scales), column_tiles.columns(biases)
            return scales, biases
        if self.scales.dtype == np.uint16:
            return bf16_to_f32(self.scales), bf16_to_f32(self.biases)
        return self.scales.astype(np.float32, copy=False), self.biases.astype(np.float32, copy=False)

    def narrowed(self) -> "AffineWeight":
        """This weight with float16 scales and biases where every float32 one is a float16 value (GGUF's Q4_0, Q8_0,
        Q5_0, Q4_1, Q5_1 unless ``-128d`` overflows: half_scales.py), else itself."""
        if self.scales.dtype != np.float32:
            return self
        with np.errstate(over="ignore"):
            halves = [a.astype(np.float16) for a in (self.scales, self.biases)]
        if not all(np.array_equal(h, a) for h, a in zip(halves, (self.scales, self.biases), strict=True)):
            return self
        return replace(self, scales=halves[0], biases=halves[1])

    def widened(self) -> "AffineWeight":
        """This weight with float32 scales and biases (what the row kernels read)."""
        scales, biases = self.float_scales()
        return replace(self, scales=scales, biases=biases)

    def records_only(self) -> "AffineWeight":
        """This K-quant weight without its float32 scales and biases (the records hold the same numbers: the column
        tiles read those in every call, ``tiles.Tiled``); a Q4_K weight keeps 0.59 bytes a weight instead of 0.84."""
        if self.records is None or self.lazy:
            return self
        blank = np.broadcast_to(np.float32(0), self.scales.shape)
        return replace(self, scales=blank, biases=blank, lazy=True)

    def in_columns(self) -> "AffineWeight":
        """This 4-, 5- or 6-bit weight laid out per 16 rows (column_tiles.arrange, packed_columns.arrange; records:
        column_records.arrange): the same bytes, what the column tiles read."""
        if self.columns:
            return self
        if self.bits == 4:
            codes, scales, biases = column_tiles.arrange(self.codes, self.scales, self.biases, self.group_size)
        else:
            codes = packed_columns.arrange(self.codes, self.bits)
            scales, biases = (column_tiles.columns(a) for a in (self.scales, self.biases))
        if self.lazy:  # (the placeholders' shape is the same in both layouts)
            scales, biases = self.scales, self.biases
        records = self._turned(column_records.arrange)
        return replace(self, codes=codes, scales=scales, biases=biases, records=records, columns=True)

    def in_rows(self) -> "AffineWeight":
        """The planar, one-row-at-a-time layout (the inverse of ``in_columns``)."""
        if not self.columns:
            return self
        if self.bits == 4:
            codes, scales, biases = column_tiles.planar(self.codes, self.scales, self.biases, self.group_size)
        else:
            codes = packed_columns.planar(self.codes, self.bits)
            scales, biases = (column_tiles.rows(a) for a in (self.scales, self.biases))
        if self.lazy:
            scales, biases = self.scales, self.biases
        records = self._turned(column_records.planar)
        return replace(self, codes=codes, scales=scales, biases=biases, records=records, columns=False)

    def _turned(self, turn: Callable[[np.ndarray, str], np.ndarray]) -> tuple[str, np.ndarray] | None:
        """The super-block records (if any) through ``turn`` (column_records.arrange or .planar)."""
        return None if self.records is None else (self.records[0], turn(self.records[1], self.records[0]))

    def packed(self) -> np.ndarray:
        """The MLX uint32 packing (for fs_weights.dequantize; 5-/6-bit codes as MLX's 8-bit ones)."""
        if self.columns:  # (its scales and biases: ``in_rows().scales``)
            return self.in_rows().packed()
        if self.bits == 8:
            return np.ascontiguousarray(self.codes).view(np.uint32)
        if self.bits in (5, 6):
            return np.ascontiguousarray(packed_codes.unpack(self.codes, self.bits)).view(np.uint32)
        e = _unplanar(self.codes, self.group_size)
        return np.ascontiguousarray(e[:, 0::2] | (e[:, 1::2] << 4)).view(np.uint32)

    def dequantize(self) -> np.ndarray:
        """float32 [out, in] through fs_weights' reference dequantizer (the oracle the kernels are tested on)."""
        if self.columns:
            return self.in_rows().dequantize()
        bits = 8 if self.bits in (5, 6) else self.bits
        scales, biases = self.float_scales()
        return dequantize(self.packed(), scales, biases, bits=bits, group_size=self.group_size)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Dequantized rows (an embedding lookup)."""
        flat = ids.reshape(-1)
        w = self
        if self.columns and self.bits == 4 and not self.lazy and HAVE_NUMBA:  # read in place: column_tiles.lookup
            return column_tiles.lookup(self.codes, self.scales, self.biases, flat, self.group_size).reshape(
                *ids.shape, self.shape[1]
            )
        if self.columns:  # the 16-row blocks holding them, back in rows; then each id's own row within its block
            C = column_tiles.COLUMNS
            at = ((flat // C)[:, None] * C + np.arange(C)).reshape(-1)
            records = None if self.records is None else (self.records[0], self.records[1][at])
            w = replace(self, codes=self.codes[at], scales=self.scales[at], biases=self.biases[at], records=records)
            w = w.in_rows()
            flat = np.arange(flat.size) * C + flat % C
        scales, biases = w.float_scales() if w.lazy else (w.scales, w.biases)
        part = AffineWeight(w.codes[flat], scales[flat], biases[flat], self.bits, self.group_size)
        return part.dequantize().reshape(*ids.shape, self.shape[1])


def from_mlx(packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int, group: int) -> AffineWeight:
    """MLX's packed codes as fs keeps them; scales and biases given in 16 bits (both bf16 bits - uint16 - or both
    float16) stay as they are (the tiles read them in place: half_scales.py), any other float dtype becomes float32."""
    if bits not in (4, 8):
        raise ValueError(f"{bits}-bit weights have no CPU kernel (4 and 8 do)")
    codes = np.asarray(packed).view(np.uint8)
    if bits == 4:
        codes = _planar(np.stack([codes & 15, codes >> 4], axis=-1).reshape(codes.shape[0], -1), group)
    if scales.dtype == biases.dtype and scales.dtype in (np.uint16, np.float16):
        return AffineWeight(codes, scales, biases, bits, group)
    scales, biases = (bf16_to_f32(a) if a.dtype == np.uint16 else a.astype(np.float32) for a in (scales, biases))
    return AffineWeight(codes, scales, biases, bits, group)


def quantize_affine(w: np.ndarray, bits: int = 8, group: int = 64) -> AffineWeight:
    """Quantize float32 (or bf16-bits uint16) weights [out, in], a few thousand rows at a time so that a large
    matrix (a 151936-row lm_head) never has float32 temporaries of its whole size. bf16 weights get bf16 scales and
    biases, as mlx-lm's convert (and ``fs-weights convert``) writes them for a bf16 model: quantizing at load is
    then converting and loading, bit for bit, and the tiles read 2 bytes per scale (half_scales.py)."""
    chunks = []
    for a in range(0, w.shape[0], 4096):
        part = w[a : a + 4096]
        part = bf16_to_f32(part) if part.dtype == np.uint16 else np.asarray(part, np.float32)
        packed, scales, biases = quantize(part, bits=bits, group_size=group)
        if w.dtype == np.uint16:
            scales, biases = f32_to_bf16(scales), f32_to_bf16(biases)
        chunks.append((packed, scales, biases))
    packed, scales, biases = (np.concatenate(c) for c in zip(*chunks, strict=True))
    return from_mlx(packed, scales, biases, bits, group)


if HAVE_NUMBA:
    from numba import njit, prange

    # Small helpers so LLVM sees one simple loop each (it vectorises them; inlined into the kernels, the same loops
    # written in place measured 1.3-1.8× slower). Codes go through int32 on the way to float32: LLVM vectorises
    # that conversion, not uint8 -> float32.

    @njit(fastmath=True, cache=True)
    def _dot8(q, x, n):  # pragma: no cover - compiled
        s = np.float32(0.0)
        for j in range(n):
            s += np.float32(np.int32(q[j])) * x[j]
        return s

    @njit(fastmath=True, cache=True)
    def _dot4(q, xl, xh, n):  # pragma: no cover - compiled
        sl = np.float32(0.0)
        sh = np.float32(0.0)
        for j in range(n):
            b = q[j]
            sl += np.float32(np.int32(b & np.uint8(15))) * xl[j]
            sh += np.float32(np.int32(b >> np.uint8(4))) * xh[j]
        return sl, sh

    @njit(fastmath=True, cache=True)
    def _dot8_64(q, x):  # pragma: no cover - compiled
        """_dot8 with the trip count a literal (MLX's default group): LLVM unrolls it into straight-line vector
        code, ~10 % more bandwidth on the 0.6B decode pass (the 4-bit loop measured slower that way)."""
        s = np.float32(0.0)
        for j in range(64):
            s += np.float32(np.int32(q[j])) * x[j]
        return s

    @njit(parallel=True, fastmath=True, cache=True)
    def _rows_q8(q, scales, biases, X, XS, G, out):  # pragma: no cover - compiled
        """out[r, i] = X[r] · w[i] for a few rows r (XS[r] = X[r]'s group sums): one pass over the codes."""
        n, ng = scales.shape
        for blk in prange((n + 15) // 16):
            for i in range(blk * 16, min(n, blk * 16 + 16)):
                row, sc, bi = q[i], scales[i], biases[i]
                for r in range(X.shape[0]):
                    x, xs = X[r], XS[r]
                    acc = np.float32(0.0)
                    for g in range(ng):
                        qg, xg = row[g * G : (g + 1) * G], x[g * G : (g + 1) * G]
                        acc += sc[g] * (_dot8_64(qg, xg) if G == 64 else _dot8(qg, xg, G)) + bi[g] * xs[g]
                    out[r, i] = acc

    @njit(parallel=True, fastmath=True, cache=True)
    def _rows_q4(q, scales, biases, X, XS, G, out):  # pragma: no cover - compiled
        """The 4-bit planar twin of _rows_q8: each pair of groups is one G-byte vector of two nibble planes."""
        n, ng = scales.shape
        H = G // 2
        for blk in prange((n + 15) // 16):
            for i in range(blk * 16, min(n, blk * 16 + 16)):
                row, sc, bi = q[i], scales[i], biases[i]
                for r in range(X.shape[0]):
                    x, xs = X[r], XS[r]
                    acc = np.float32(0.0)
                    for c in range(ng // 2):
                        a, g = 2 * c * G, 2 * c
                        sl, sh = _dot4(row[c * G : (c + 1) * G], x[a : a + G], x[a + G : a + 2 * G], G)
                        acc += sc[g] * sl + sc[g + 1] * sh + bi[g] * xs[g] + bi[g + 1] * xs[g + 1]
                    if ng % 2:  # an odd last group shares its bytes between its own two halves
                        g = ng - 1
                        a, b = g * G, ng // 2 * G
                        sl, sh = _dot4(row[b : b + H], x[a : a + H], x[a + H : a + G], H)
                        acc += sc[g] * (sl + sh) + bi[g] * xs[g]
                    out[r, i] = acc

    @njit(fastmath=True, cache=True)
    def _dequant_rows(q, scales, biases, G, bits, a, out):  # pragma: no cover - compiled
        """out[i] = float32 weights of row a + i; serial on purpose (blas.py says why)."""
        ng = scales.shape[1]
        for i in range(out.shape[0]):
            row, sc, bi, o = q[a + i], scales[a + i], biases[a + i], out[i]
            if bits == 8:
                for g in range(ng):
                    b = g * G
                    for j in range(G):
                        o[b + j] = sc[g] * np.float32(np.int32(row[b + j])) + bi[g]
                continue
            for c in range(ng // 2):
                g, b = 2 * c, 2 * c * G
                for j in range(G):
                    t = row[c * G + j]
                    o[b + j] = sc[g] * np.float32(np.int32(t & np.uint8(15))) + bi[g]
                    o[b + G + j] = sc[g + 1] * np.float32(np.int32(t >> np.uint8(4))) + bi[g + 1]
            if ng % 2:
                g, H = ng - 1, G // 2
                for j in range(H):
                    t = row[ng // 2 * G + j]
                    o[g * G + j] = sc[g] * np.float32(np.int32(t & np.uint8(15))) + bi[g]
                    o[g * G + H + j] = sc[g] * np.float32(np.int32(t >> np.uint8(4))) + bi[g]


def _tile_kind(w: AffineWeight) -> tuple[str, bool, bool]:
    """(the tile kind ``w`` runs as, whether it runs on the tiles, whether they read its 16-bit scales as they are):
    int8 activations (integer_tiles.py) where they apply, the float kinds otherwise; tiled where this CPU, the shape
    and the strides allow."""
    k, G, half = w.shape[1], w.group_size, tiles.scale_layout(w)
    kind = {8: "q8", 6: "q6i", 5: "q5i", 4: "q4"}[w.bits]
    integer = "q4i" if w.bits == 4 else "q8i" if w.bits == 8 and SWITCHES.int8_activations_8bit else None
    if integer is not None and tiles.applies(integer, k, G, half):
        kind = integer
    keep = half is not None and tiles.reads_half_scales(tiles.widest(kind, k, G, layout=half), half, G)
    strided = w.codes.strides[1] == 1 and w.scales.strides == w.biases.strides
    strided = strided and w.scales.strides[1] == w.scales.itemsize
    return kind, strided and tiles.applies(kind, k, G, half if keep else None), keep


class AffineLinear(Linear):
    """``x @ Wᵀ`` for an ``AffineWeight``. With batch invariance (the default) every input takes the register tiles
    (tiles.py) where this CPU runs them, else one row-kernel pass over the codes. With ``FS_BATCH_INVARIANT=0``
    decode-sized inputs (≤ SMALL rows) take integer dot products with int8 activations where vnni.py applies, else
    the tiles or the row kernel, and prefill dequantizes in cache-sized chunks (to bf16 for the bf16 GEMM with 4-bit
    codes, else to float32 for BLAS); without numba, the reference dequantizer and BLAS."""

    def __init__(self, w: AffineWeight):
        k, G = w.shape[1], w.group_size
        if w.bits in (5, 6) and not tiles.applies(f"q{w.bits}i", k, G):  # their tiles off: 8-bit codes
            w = replace(w, codes=packed_codes.unpack(w.codes, w.bits), bits=8)
        # decided once: the CPU, the switches and the shape do not change. Batch invariance (the default) runs one
        # kernel for every M (the tiles where they apply, else the row kernel), so a row's result never depends on
        # how many rows share the call
        self.invariant = SWITCHES.batch_invariant
        self.kind, self.tiled, keep = _tile_kind(w)
        if tiles.scale_layout(w) is not None and not (self.tiled and self.invariant and keep):
            w = w.widened()  # only the tiles read 16-bit scales: the row kernels and the other paths get float32
            self.kind, self.tiled, _ = _tile_kind(w)
        kind = tiles.widest(self.kind, k, G, layout=tiles.scale_layout(w))
        if self.tiled and self.invariant:  # only the tiles read the column layout: every call must take them
            kind = tiles.by_columns(kind, w.shape[0], k, G, tiles.scale_layout(w), w.records[0] if w.records else None)
            w = w.in_columns() if kind in column_tiles.KINDS else w  # kept instead of the planar codes, not beside
            if kind in column_tiles.KINDS and SWITCHES.superblock_scales:
                w = w.records_only()  # every call reads the records (tiles.Tiled): the float32 copies go
        self.w = w
        self.shape = w.shape
        self.tiles = tiles.Tiled(kind, w) if self.tiled else None
        self.integer_decode = vnni.applies(w.bits, w.group_size, k)
        self.gemm = bf16_gemm.applies(w) and not self.invariant

    def matmul(self, rows: np.ndarray) -> np.ndarray:
        if (
            self.invariant or self.w.bits == 6
        ) and self.tiles is not None:  # every M on the tiles (6-bit codes: only there)
            return self.tiles(rows)
        w = self.w
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        n, k = w.shape
        G = w.group_size
        if not HAVE_NUMBA:
            return rows @ w.dequantize().T
        small = rows.shape[0] <= SMALL or self.invariant
        if small and self.integer_decode:
            return vnni.rows(w, rows)
        if small and self.tiles is not None:
            return self.tiles(rows)
        if small:
            y = np.empty((rows.shape[0], n), np.float32)
            xsum = rows.reshape(rows.shape[0], -1, G).sum(axis=2, dtype=np.float32)
            kernel = _rows_q8 if w.bits == 8 else _rows_q4
            fan_out((w.bits, w.shape, bucket(rows.shape[0])), kernel, w.codes, w.scales, w.biases, rows, xsum, G, y)
            return y
        if self.gemm:  # 4-bit prefill: dequantized to bf16, multiplied on the bf16 GEMM

            def fill_bf16(a: int, buf: np.ndarray) -> None:
                f32 = scratch(buf.shape[0], k)
                _dequant_rows(w.codes, w.scales, w.biases, G, w.bits, a, f32)
                bf16_gemm.round_rows(f32, buf)

            return bf16_gemm.blocked(rows, n, k, fill_bf16)
        return blocked_matmul(rows, n, k, lambda a, buf: _dequant_rows(w.codes, w.scales, w.biases, G, w.bits, a, buf))

    def rows(self, ids: np.ndarray) -> np.ndarray:
        return self.w.rows(ids)

    @property
    def uses_numba_threads(self) -> bool:
        return self.gemm

    @property
    def nbytes(self) -> int:
        return self.w.nbytes
