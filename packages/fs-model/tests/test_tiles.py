"""The register-tiled kernels (cpu/tiles.py): the float64 reference within float32 rounding on every 0.6B shape,
and each row's output the same bits whatever else shares the call (every panel and edge tile)."""

import numpy as np
import pytest

from fs_model.cpu import tiles
from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.bf16 import Bf16Linear
from fs_model.cpu.integer_tiles import quantize_rows, scales_and_sums
from fs_weights import bf16_to_f32, f32_to_bf16
from model_helpers import cpu_name, int8_activation_contract, need_tiles, rel_err

pytestmark = pytest.mark.kernels

SHAPES = {"q_proj": (2048, 1024), "k/v_proj": (1024, 1024), "o_proj": (1024, 2048), "gate/up": (3072, 1024),
          "down": (1024, 3072), "odd rows": (37, 256), "one row": (1, 128)}  # fmt: skip


def weights(kind, n, k, group=64, seed=0):
    w = np.random.default_rng(seed).standard_normal((n, k), dtype=np.float32)
    if kind == "bf16":
        b = f32_to_bf16(w)
        return b, bf16_to_f32(b)
    q = quantize_affine(w, 8 if kind == "q8" else 4, group)
    return q, q.dequantize()


@pytest.fixture
def tiled(reference):
    reference("numba")
    need_tiles("the row kernels run (test_kernels.py, test_batch_invariance.py)")
    if not tiles.applies("bf16", 1024):
        pytest.skip(f"{cpu_name()} has no AVX2 + FMA: the row kernels run (test_kernels.py, test_batch_invariance.py)")


def compiled(kind, group=64):
    """Skip an AVX-512 kind (trailing w) where this CPU has no AVX-512: the AVX2 kinds run there."""
    if tiles.width(kind) == 16 and tiles.kernels(kind, 0 if kind == "bf16w" else group) is None:
        pytest.skip(f"{kind} needs AVX-512 (avx512f, avx512bw; q4iw avx512vnni): this CPU runs the 8-wide tiles")
    return kind[:-1] if tiles.width(kind) == 16 else kind


@pytest.mark.parametrize("kind", ["bf16", "q8", "q4", "bf16w", "q8w", "q4w"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_tiles_equal_the_float64_reference(tiled, kind, name):
    n, k = SHAPES[name]
    w, dense = weights(compiled(kind), n, k)
    x = np.random.default_rng(1).standard_normal((5, k), dtype=np.float32)
    want = x.astype(np.float64) @ dense.astype(np.float64).T
    got = tiles.matmul(kind, w, x)
    assert got.dtype == np.float32 and got.shape == (5, n)
    assert rel_err(got, want) < 1e-5


def test_4_bit_groups_of_32_take_int8_activations_per_group_of_32(tiled):
    """GGUF's Q4_K / Q4_1 / Q4_0 (4-bit groups of 32) on the integer tile: its exact contract, and the float
    product within the activation rounding."""
    n, k = SHAPES["gate/up"]
    w, dense = weights("q4", n, k, group=32)
    x = np.random.default_rng(1).standard_normal((5, k), dtype=np.float32) * np.float32(3)
    assert AffineLinear(w).kind == "q4i"
    kinds = ["q4i"] + (["q4iw"] if tiles.kernels("q4iw", 32) is not None else [])  # VNNI: vnni_superblock.py
    for kind in kinds:
        got = tiles.matmul(kind, w, x)
        assert rel_err(got, int8_activation_contract(w, x)) < 1e-5
        assert rel_err(got, x.astype(np.float64) @ dense.astype(np.float64).T) < 5e-2


@pytest.mark.parametrize("name", ["q_proj", "o_proj", "down"])
def test_vnni_groups_of_32_walk_super_blocks_in_their_own_order(tiled, name, monkeypatch):
    """On VNNI, groups of 32 take the super-block tile (with FS_COLUMN_TILES=0, or a K-quant's records: else
    column_tiles.py's): the contract to float32 rounding on the 0.6B shapes, and its own order of the sums (another
    chain than the AVX2 tile's: the bits of the two differ, so one host runs one of them for a matrix, chosen by
    ``widest``)."""
    from fs_model import cpu

    compiled("q4iw", 32)
    monkeypatch.setattr(cpu.SWITCHES, "column_tiles", False)
    n, k = SHAPES[name]
    w, _ = weights("q4", n, k, group=32)
    x = np.random.default_rng(1).standard_normal((5, k), dtype=np.float32) * np.float32(3)
    assert tiles.widest("q4i", k, 32) == "q4iw" and AffineLinear(w).tiles.kind == "q4iw"  # type: ignore[union-attr]
    got = tiles.matmul("q4iw", w, x)
    assert rel_err(got, int8_activation_contract(w, x)) < 1e-5
    assert not np.array_equal(got, tiles.matmul("q4i", w, x))
    assert tiles.widest("q4i", 1024 + 64, 32) == "q4i"  # not a whole number of super-blocks: the AVX2 tile
    from fs_model.cpu import tile_calls, vnni_superblock
    from fs_model.cpu.integer_tiles import quantize_rows

    xq, _ = quantize_rows(x, 32)  # the compiled call arranges the rows as vnni_superblock.arrange says
    arranged = np.empty_like(xq)
    tile_calls._arrange(xq, arranged)
    assert np.array_equal(arranged, vnni_superblock.arrange(xq))


@pytest.mark.parametrize("kind", ["q8", "q8w"])
def test_groups_of_16_tile_as_groups_of_64_do(tiled, kind):
    """GGUF's Q6_K keeps its codes as 8-bit groups of 16 (one 16-byte chunk per group on AVX-512)."""
    n, k = SHAPES["down"]
    w, dense = weights(compiled(kind, 16), n, k, group=16)
    x = np.random.default_rng(1).standard_normal((3, k), dtype=np.float32)
    assert tiles.applies(compiled(kind, 16), k, 16) and AffineLinear(w).tiled
    assert rel_err(tiles.matmul(kind, w, x), x.astype(np.float64) @ dense.astype(np.float64).T) < 1e-5


@pytest.mark.parametrize("kind", ["q4i", "q8i", "q4iw"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_int8_activation_tiles_equal_their_contract(tiled, kind, name):
    """4- and 8-bit codes × int8 activations (integer_tiles.py): the exact contract to float32 rounding, and within
    the activation rounding (about 1 %) of the float product. 4-bit weights take them by default, 8-bit ones with
    FS_INT8_ACTIVATIONS=all."""
    n, k = SHAPES[name]
    w, dense = weights(kind[:2], n, k)
    x = np.random.default_rng(1).standard_normal((5, k), dtype=np.float32) * np.float32(3)
    assert tiles.applies(compiled(kind), k, 64) and AffineLinear(w).kind == ("q8" if kind == "q8i" else "q4i")
    got = tiles.matmul(kind, w, x)
    assert rel_err(got, int8_activation_contract(w, x)) < 1e-5
    assert rel_err(got, x.astype(np.float64) @ dense.astype(np.float64).T) < 5e-2


def test_int8_activations_need_groups_of_64_or_32_and_the_switch(tiled, monkeypatch):
    from fs_model import cpu

    assert (
        not tiles.applies("q4i", 1024, 128) and not tiles.applies("q4i", 192, 64) and not tiles.applies("q8i", 1024, 32)
    )
    vnni = tiles.kernels("q4iw", 32) is not None  # GGUF's Q4_K: VNNI's super-block tile, else AVX2's
    assert tiles.applies("q4i", 1024, 32) and tiles.widest("q4i", 1024, 32) == ("q4iw" if vnni else "q4i")
    monkeypatch.setattr(cpu.SWITCHES, "int8_activations_8bit", True)
    assert AffineLinear(weights("q8", 8, 128)[0]).kind == "q8i"
    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", False)
    assert not tiles.applies("q4i", 1024, 64) and AffineLinear(weights("q4", 8, 128)[0]).kind == "q4"
    assert not tiles.applies("q8i", 1024, 64)


@pytest.mark.parametrize(
    "kind, group",
    [("bf16", 0), ("q8", 16), ("q8", 32), ("q8", 64), ("q8", 128), ("q4", 32), ("q4", 64), ("q4i", 32), ("q4i", 64),
     ("q8i", 64), ("bf16w", 0), ("q8w", 16), ("q8w", 32), ("q8w", 128), ("q4w", 32), ("q4w", 64), ("q4iw", 64),
     ("q4iw", 32)],
)  # fmt: skip
def test_a_row_gets_the_same_bits_in_every_panel(tiled, kind, group):
    """13 rows = panels of 4, 4, 4 and a lone row; 6 = 4 + 2; 3 = 2 + 1: a row computed by any of them, and alone,
    is the same float32 bits (the per-element chain does not depend on the tile)."""
    n, k = 45, 512  # 45 weight rows: full tiles and one-row edges in the last block
    base = compiled(kind, group or 64)
    w, _ = weights(base[:2] if base.endswith("i") else base, n, k, group or 64)
    x = np.random.default_rng(2).standard_normal((13, k), dtype=np.float32)
    whole = tiles.matmul(kind, w, x)
    for lo, hi in ((0, 6), (5, 8), (12, 13), (3, 7)):
        assert np.array_equal(tiles.matmul(kind, w, x[lo:hi]), whole[lo:hi])
    for r in range(13):
        assert np.array_equal(tiles.matmul(kind, w, x[r : r + 1])[0], whole[r])


def test_shapes_the_tiles_do_not_cover_take_the_row_kernels(tiled):
    w = f32_to_bf16(np.random.default_rng(0).standard_normal((17, 1000 + 4), dtype=np.float32))  # k % 8 != 0
    assert not Bf16Linear(w).tiled and Bf16Linear(np.ascontiguousarray(w[:, :1000])).tiled
    x = np.random.default_rng(1).standard_normal((3, 1004), dtype=np.float32)
    assert rel_err(Bf16Linear(w).matmul(x), x.astype(np.float64) @ bf16_to_f32(w).astype(np.float64).T) < 1e-5
    assert not tiles.applies("bf16", 1004) and not tiles.applies("q4", 64 * 3, 64)  # odd number of 4-bit groups
    q = quantize_affine(np.ones((8, 64 * 3), np.float32), 4, 64)
    assert not AffineLinear(q).tiled and AffineLinear(quantize_affine(np.ones((8, 128), np.float32), 4, 64)).tiled


def test_each_matrix_takes_the_widest_tile_its_shape_allows(tiled, monkeypatch):
    """AVX-512 hosts run 16-wide tiles where k (and the group) split into 16-float chunks; the layers keep that
    choice for every call (it is part of each element's chain), and FS_WIDE_TILES=0 keeps the 8-wide ones."""
    from fs_model import cpu

    if tiles.kernels("bf16w") is None:
        assert tiles.widest("bf16", 1024) == "bf16" and tiles.widest("q8", 1024, 64) == "q8"
        pytest.skip(f"{cpu_name()} has no AVX-512: only the 8-wide tiles exist (checked above)")
    monkeypatch.setattr(cpu.SWITCHES, "bf16_gemm", False)  # float32 activations (bf16d: further down)
    assert tiles.widest("bf16", 1024) == "bf16w" and tiles.widest("q4", 1024, 64) == "q4w"
    assert tiles.widest("bf16", 1016) == "bf16" and tiles.widest("q8", 1024, 8) == "q8"  # 1016, 8: not × 16
    assert tiles.widest("q8i", 1024, 64) == "q8i"  # the 8-bit integer tile has one width
    if tiles.kernels("q4iw", 64) is not None:  # AVX-512 VNNI: the 4-bit integer tile is 16-wide too
        assert tiles.widest("q4i", 1024, 64) == "q4iw"
        assert AffineLinear(quantize_affine(np.ones((8, 1024), np.float32), 4, 64)).tiles.kind == "q4iw"  # type: ignore[union-attr]
    w, dense = weights("bf16", 64, 1024)
    layer = Bf16Linear(w)
    assert layer.tiles is not None and layer.tiles.kind == "bf16w"
    x = np.random.default_rng(3).standard_normal((3, 1024), dtype=np.float32)
    assert rel_err(layer.matmul(x), x.astype(np.float64) @ dense.astype(np.float64).T) < 1e-5
    monkeypatch.setattr(cpu.SWITCHES, "bf16_gemm", True)
    if tiles.kernels("bf16d") is not None:  # AVX512-BF16: bf16 weights take bf16 activations where k splits by 32
        assert tiles.widest("bf16", 1024) == "bf16d" and Bf16Linear(w).tiles.kind == "bf16di"  # type: ignore[union-attr]
        assert tiles.widest("bf16", 1040) == "bf16w"  # 1040 = 65 · 16: no chunks of 32
    else:
        assert tiles.widest("bf16", 1024) == "bf16w"
    monkeypatch.setattr(cpu.SWITCHES, "wide_tiles", False)
    assert tiles.widest("bf16", 1024) == "bf16" and Bf16Linear(w).tiles.kind == "bf16"  # type: ignore[union-attr]


def test_the_switch_turns_them_off(tiled, monkeypatch):
    from fs_model import cpu

    monkeypatch.setattr(cpu.SWITCHES, "tiles", False)
    w, _ = weights("bf16", 64, 128)
    assert not tiles.applies("bf16", 128) and not Bf16Linear(w).tiled


def test_activation_quantization(reference):
    """The int8 activations both integer 4-bit kernels use (integer_tiles.quantize_rows)."""
    reference("numba")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 256), dtype=np.float32) * np.float32(5)
    x[1, :64] = 0  # an all-zero group: scale 1, codes 0, no division by zero
    xq, side = quantize_rows(x)
    sx, xs = scales_and_sums(side)
    assert xq.dtype == np.int8 and np.abs(xq.astype(int)).max() <= 127
    back = xq.astype(np.float32) * np.repeat(sx, 64, axis=1)
    assert np.all(np.abs(back - x) <= np.repeat(sx, 64, axis=1) / 2 + 1e-6)
    # the bias term's sums are of the rounded activations (exact integer sums, one rounding), within G·sx/2 of Σx
    assert np.array_equal(xs, sx * xq.astype(np.int64).reshape(2, -1, 64).sum(-1).astype(np.float32))
    assert np.all(np.abs(xs - x.reshape(2, -1, 64).sum(-1)) <= 64 * sx / 2 + 1e-4)
    assert not np.any(xq[1, :64]) and sx[1, 0] == 1


def half_scaled(bits, n, k, group, layout="bf16", seed=0):
    """An AffineWeight whose scales and biases are 16-bit floats (bf16 bits, as an MLX file of a bf16 model stores
    them; float16, as GGUF's Q4_0 / Q8_0 factors), and the same weight with them widened to float32."""
    from dataclasses import replace

    q = quantize_affine(np.random.default_rng(seed).standard_normal((n, k), dtype=np.float32), bits, group)
    narrow = f32_to_bf16 if layout == "bf16" else (lambda a: a.astype(np.float16))
    held = replace(q, scales=narrow(q.scales), biases=narrow(q.biases))
    return held, held.widened()


@pytest.mark.parametrize(
    "kind, group, layout",
    [("q8", 32, "bf16"), ("q8", 64, "bf16"), ("q8", 128, "bf16"), ("q4", 32, "bf16"), ("q4", 64, "bf16"),
     ("q4", 128, "bf16"), ("q8w", 64, "bf16"), ("q8w", 128, "bf16"), ("q4w", 32, "bf16"), ("q4w", 64, "bf16")]
    + [(kind, group, layout) for kind, group in (("q4i", 32), ("q4i", 64), ("q8i", 64), ("q4iw", 64), ("q4iw", 32))
       for layout in ("bf16", "f16")],
)  # fmt: skip
def test_16_bit_scales_read_in_place_give_the_bits_of_float32_copies(tiled, kind, group, layout):
    """half_scales.py: the tiles widen 16-bit scales and biases as they read them - exact, so every element is the
    bits the same tile computes from float32 copies, for every panel (a wrong address or conversion would not).
    float16 scales: the int8-activation kinds only (``tiles.reads_half_scales``: the float kinds get them widened, as
    the AVX2 integer tile on groups of 32 gets both; tested here all the same, the kernels exist)."""
    assert tiles.reads_half_scales(kind, layout, group) == (
        (layout == "bf16" or kind in tiles.INTEGER) and (kind, group) != ("q4i", 32)
    )
    base = compiled(kind, group)
    held, widened = half_scaled(4 if base.startswith("q4") else 8, 45, 1024, group, layout)
    assert tiles.scale_layout(held) == layout and tiles.scale_layout(widened) is None
    x = np.random.default_rng(2).standard_normal((13, 1024), dtype=np.float32)
    for rows in (x, x[:6], x[3:6], x[5:6]):
        assert np.array_equal(tiles.matmul(kind, held, rows), tiles.matmul(kind, widened, rows))


def test_a_layer_keeps_16_bit_scales_only_where_every_call_takes_the_tiles(tiled, monkeypatch):
    """AffineLinear reads bf16 scales in place (the same arrays - or, on q4ic, the same values laid out per 16 rows
    in place of them: column_tiles.py -, no float32 copy) on the tiles, and gives the other paths - batch invariance
    off, a shape the tiles do not cover - float32 copies, with the same results."""
    from fs_model import cpu

    held, widened = half_scaled(4, 64, 1024, 64)
    x = np.random.default_rng(3).standard_normal((5, 1024), dtype=np.float32)
    layer = AffineLinear(held)
    if layer.w.columns:
        assert layer.tiles is not None and layer.tiles.kind == "q4ic" and layer.w.scales.dtype == np.uint16
        rows = layer.w.in_rows()
        assert np.array_equal(rows.scales, held.scales) and np.array_equal(rows.biases, held.biases)
    else:
        assert layer.tiled and layer.w.scales is held.scales and layer.w.biases is held.biases
    assert np.array_equal(layer.matmul(x), AffineLinear(widened).matmul(x))
    monkeypatch.setattr(cpu.SWITCHES, "batch_invariant", False)
    loose = AffineLinear(held)
    assert loose.w.scales.dtype == np.float32 and np.array_equal(loose.w.scales, widened.scales)
    assert np.array_equal(loose.matmul(x), AffineLinear(widened).matmul(x))
    monkeypatch.setattr(cpu.SWITCHES, "batch_invariant", True)
    odd, _ = half_scaled(4, 8, 64 * 3, 64)  # an odd number of 4-bit groups: the row kernel
    assert not AffineLinear(odd).tiled and AffineLinear(odd).w.scales.dtype == np.float32
    q8, _ = half_scaled(8, 8, 256, 32, "f16")  # float16 scales on the float 8-bit tile: widened (reads_half_scales)
    assert AffineLinear(q8).tiled and AffineLinear(q8).w.scales.dtype == np.float32


def test_float32_scales_narrow_to_float16_only_when_every_value_is_one(tiled):
    """GGUF's Q8_0 stores d in float16 and fs's bias is -128d: float16 values unless |d| > 511.75, where -128d
    overflows float16 - that matrix keeps float32 (an Inf scale would be a silent wrong answer)."""
    from dataclasses import replace

    held, widened = half_scaled(8, 8, 256, 32, "f16")
    assert widened.narrowed().scales.dtype == np.float16 and np.array_equal(widened.narrowed().biases, held.biases)
    big = widened.scales.copy()
    big[3, 1] = 600.0  # a float16 value whose -128x is not
    wide = replace(widened, scales=big, biases=big * np.float32(-128))
    assert wide.narrowed() is wide
    third = replace(widened, scales=widened.scales / np.float32(3))  # not float16 values
    assert third.narrowed() is third


def _hsum_tree(v):
    """float_tiles.hsum's order in numpy float32: the low half plus the high half, lane by lane, down to one lane."""
    v = np.asarray(v, np.float32)
    while v.shape[-1] > 1:
        h = v.shape[-1] // 2
        v = v[..., :h] + v[..., h:]
    return v[..., 0]


@pytest.mark.parametrize("W", [8, 16])
def test_the_transposing_tree_adds_every_accumulator_by_its_own_tree(tiled, W):
    """``float_tiles.stores`` sums a tile's accumulators all at once; each sum must be one accumulator's ``hsum``
    bit for bit (a shuffle that pairs the wrong lanes adds the same numbers in another order: other bits), for
    every count a tile can have, powers of two or not (padding lanes must not leak into a neighbour's sum)."""
    import ctypes

    from fs_model.cpu.float_tiles import transposed_sums
    from fs_model.cpu.llvm_ir import compile_ir

    features = ("avx512f",) if W == 16 else ("avx2", "fma")
    counts = range(1, W + 1)
    ir = []
    for c in counts:
        L = [f"define void @sums{c}(i64 %pa, i64 %po) {{", "entry:"]
        for j in range(c):
            L += [f"  %a{j}.a = add i64 %pa, {4 * W * j}", f"  %a{j}.p = inttoptr i64 %a{j}.a to ptr",
                  f"  %a{j} = load <{W} x float>, ptr %a{j}.p, align 4"]  # fmt: skip
        tree, total, width = transposed_sums([f"%a{j}" for j in range(c)], W, "t")
        assert width >= c
        L += [*tree, "  %o = inttoptr i64 %po to ptr", f"  store <{width} x float> {total}, ptr %o, align 4"]
        ir.append("\n".join([*L, "  ret void", "}"]))
    sig = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)
    fns = compile_ir("\n".join(ir), features, {f"sums{c}": sig for c in counts})
    if fns is None:
        pytest.skip(f"{cpu_name()} has no {'AVX-512' if W == 16 else 'AVX2'}")
    rng = np.random.default_rng(W)
    for c in counts:
        # magnitudes spread over 2^±20: any other pairing of the lanes rounds differently
        a = (rng.standard_normal((c, W)) * 2.0 ** rng.integers(-20, 20, (c, W))).astype(np.float32)
        out = np.full(W, np.nan, np.float32)
        fns[f"sums{c}"](a.ctypes.data, out.ctypes.data)
        np.testing.assert_array_equal(out[:c].view(np.uint32), _hsum_tree(a).view(np.uint32), err_msg=f"{c} of {W}")
