"""A quantized matrix's scales and biases read as the 16-bit floats they are stored in, widened inside a tile, in
LLVM IR.

Why: an MLX 4-bit checkpoint of a bf16 model (what mlx-community publishes) stores each group of 64 weights as 32
code bytes plus a bf16 scale and a bf16 bias: 0.5625 bytes per weight. Copied to float32 the scales and biases
become 0.125 of those bytes, so the weights as the tiles read them were 1.11× the file, in memory and in what every
decode step streams (Qwen3-30B-A3B's 17.19 GB of weights: 1.9 GB more resident, a 24 GiB machine's margin). Read in
place from the mapped file, they cost nothing beyond the file's own pages. GGUF's Q4_0 / Q8_0 / Q5_0 / Q4_1 / Q5_1
keep a float16 factor per group of 32 (``d``, and ``m``); their biases (``-8d``, ``-128d``, ``-16d``, ``m``) are
float16 values too unless ``-128d`` overflows, so such a matrix keeps float16 scales and biases: 0.625 bytes per
4-bit weight instead of 0.75.

Contract: widening is exact - a bf16 value is the top half of a float32 (``bits << 16`` in integer lanes, then a
bitcast), a float16 one converts exactly (``fpext``: F16C's ``vcvtph2ps``, which every AVX2 CPU has) - so a tile
reading 16-bit scales and biases computes every element with the bits of the same tile reading float32 copies of
them (tested per kind in test_tiles.py). Addresses: group g of a weight row whose scales start at ``srow`` and
biases at ``brow`` lies at ``srow + 2g`` and ``brow + 2g``.

Symmetric groups (``SYMMETRIC``): GGUF's Q4_0 and Q5_0 store one factor per group, and their bias is the factor
times -2^(bits-1) (-8d, -16d). Where every float16 bias is exactly that product, the column tiles read the scales
alone and make each bias in a register (one multiplication by a power of two: exact), so a Q4_0 matrix streams
the file's 0.5625 bytes a weight instead of 0.625 - and every element keeps its bits, since the register holds the
value the stored bias widens to (``symmetric`` compares them bit for bit, in float32, where the tiles compute).

Which matrices keep 16-bit scales is decided once, at load (``numpy/build.py``: stored so, or float32 values that
are all float16 values; only where the tiles run every call of the matrix); the row kernels and the non-invariant
paths get float32 copies (``AffineWeight.widened``).
"""

import numpy as np

LAYOUTS = ("bf16", "f16")  # the ``layout`` values the tile generators and tiles.kernels take for this storage
SYMMETRIC = "f16sym"  # float16 scales whose biases the column tiles make from them (the module docstring)
FEATURES = {"bf16": (), "f16": ("f16c",), SYMMETRIC: ("f16c",)}  # what the widening needs beyond the tile's own


def symmetric(scales: np.ndarray, biases: np.ndarray, bits: int) -> bool:
    """Whether every bias is exactly its scale times -2^(bits-1) as float32 (where the tiles compute: a float16
    bias that overflowed to inf, or was rounded, is not), so that a tile making the product has the stored bits."""
    if scales.dtype != np.float16 or biases.dtype != np.float16 or scales.shape != biases.shape:
        return False
    made = scales.astype(np.float32) * np.float32(-(1 << (bits - 1)))
    return bool(np.array_equal(made.view(np.uint32), biases.astype(np.float32).view(np.uint32)))


def widen(name: str, address: str, layout: str, lanes: int = 1) -> list[str]:
    """IR defining ``name``: the ``lanes`` 16-bit floats (``layout``) at byte ``address`` (an i64 value) as float32 -
    a ``float`` for one lane, else ``<lanes x float>``."""
    vec = (lambda t: t) if lanes == 1 else (lambda t: f"<{lanes} x {t}>")
    load = [f"  {name}.p = inttoptr i64 {address} to ptr"]
    if layout == "f16":
        return [*load, f"  {name}.h = load {vec('half')}, ptr {name}.p, align 1",
                f"  {name} = fpext {vec('half')} {name}.h to {vec('float')}"]  # fmt: skip
    if layout != "bf16":
        raise ValueError(f"16-bit scales are bf16 or f16, not {layout!r}")
    shift = "16" if lanes == 1 else "splat (i32 16)"
    return [
        *load,
        f"  {name}.h = load {vec('i16')}, ptr {name}.p, align 1",
        f"  {name}.w = zext {vec('i16')} {name}.h to {vec('i32')}",
        f"  {name}.u = shl {vec('i32')} {name}.w, {shift}",
        f"  {name} = bitcast {vec('i32')} {name}.u to {vec('float')}",
    ]


def scale_and_bias(s: str, b: str, srow: str, brow: str, group: str, layout: str, lanes: int = 1) -> list[str]:
    """IR defining ``s`` and ``b``: the scale and bias of group ``group`` (an i64 value) of the weight row whose
    16-bit scales start at address ``srow`` and biases at ``brow`` (i64 values); with ``lanes`` > 1 those of
    ``lanes`` consecutive groups from ``group`` on, as ``<lanes x float>``."""
    return [
        f"  {s}.o = mul i64 {group}, 2",
        f"  {s}.sa = add i64 {srow}, {s}.o",
        f"  {b}.ba = add i64 {brow}, {s}.o",
        *widen(s, f"{s}.sa", layout, lanes),
        *widen(b, f"{b}.ba", layout, lanes),
    ]
