"""GGUF K-quant matrices on tiles that read super-block records (cpu/superblock_scales.py) instead of float32
scales and biases: every output element the same bits as the tile reading the expanded scales, for every tile kind
that takes records, every panel (M = 1..9) and blocks at the edges (zero, negative, subnormal and the largest
float16 factors; every 6-bit scale and min at 0 or 63); fewer bytes per weight than the expanded parts."""

import numpy as np
import pytest

from fs_model import cpu
from fs_model.cpu import tile_calls, tiles
from fs_model.cpu.affine import AffineLinear, from_mlx
from fs_weights.gguf_blocks import BLOCK_BYTES, FORMATS, SUPERBLOCKS, affine_part, superblock_records
from model_helpers import need_tiles

pytestmark = pytest.mark.kernels

FACTORS = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}  # byte offsets of each block's float16 d (and dmin)
EDGES = np.array([0.0, -0.0, 6e-8, -6e-5, 65504.0, -65504.0, 1e-3, -2.5], np.float16)


def kquant(kind, n, k, seed=0, edges=False):
    """A ``kind`` matrix [n, k] from random block bytes (every code and sub-scale a file may hold), as the GGUF
    loader keeps it: MLX affine parts plus the super-block records."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n, k // 256, BLOCK_BYTES[kind]), dtype=np.uint8)
    for at in FACTORS[kind]:
        d = rng.uniform(-2e-2, 2e-2, raw.shape[:2]).astype(np.float16)
        if edges:
            d.reshape(-1)[: EDGES.size * 3] = np.tile(EDGES, 3)
            sub = slice(4, 16) if kind != "Q6_K" else slice(192, 208)  # the sub-block scales (and mins)
            raw[:2, :, sub] = 0xFF if kind != "Q6_K" else 0x80  # Q4_K / Q5_K: sc and mn 63; Q6_K: sc -128
            raw[2:4, :, sub] = 0 if kind != "Q6_K" else 0x7F
        raw[..., at : at + 2] = d[..., None].view(np.uint8)
    data = raw.reshape(-1)
    bits, G = FORMATS[kind]
    parts = [affine_part(kind, data, (n, k), p) for p in ("weight", "scales", "biases")]
    w = from_mlx(*parts, bits, G)
    return w, (SUPERBLOCKS[kind], superblock_records(kind, data, (n, k)))


@pytest.fixture
def tiled(reference):
    reference("numba")
    need_tiles("the row kernels run, which read the expanded scales")
    if not tiles.applies("bf16", 1024):
        pytest.skip("this CPU has no AVX2 + FMA: the row kernels run, which read the expanded scales")


@pytest.fixture
def every_call(monkeypatch):
    """Calls of any number of rows take the records' tiles (by default one-row calls: tile_calls.RECORD_ROWS)."""
    monkeypatch.setattr(tile_calls, "RECORD_ROWS", 64)


def both(kind, w, records, x):
    """(the tile reading records, the same tile reading the float32 scales and biases)."""
    a = tiles.Tiled(kind, replace_records(w, records))
    b = tiles.Tiled(kind, w)
    assert a.layout == records[0] and b.single is None and b.fns != a.chosen(x.shape[0])[0]
    assert a.chosen(x.shape[0]) == (a.single or (a.fns, a.weights))  # q4ic: every call reads them (tiles.Tiled)
    return a(x), b(x)


def replace_records(w, records):
    from dataclasses import replace

    return replace(w, records=records)


KINDS = [("Q4_K", "q4i"), ("Q4_K", "q4iw"), ("Q4_K", "q4"), ("Q4_K", "q4w"), ("Q4_K", "q4ic"), ("Q5_K", "q8"),
         ("Q5_K", "q8w"), ("Q6_K", "q8"), ("Q6_K", "q8w")]  # fmt: skip


@pytest.mark.parametrize("gguf_type, kind", KINDS)
@pytest.mark.parametrize("edges", [False, True])
def test_records_give_the_bits_of_the_expanded_scales_in_every_panel(tiled, every_call, gguf_type, kind, edges):
    if tiles.width(kind) == 16 and tiles.kernels(kind, FORMATS[gguf_type][1]) is None:
        pytest.skip(f"{kind} needs AVX-512: this CPU runs the 8-wide tiles")
    n, k = 45, 512  # full tiles and one-row edges; two super-blocks per row
    n = 48 if kind == "q4ic" else n  # q4ic: whole blocks of 16 rows, its records arranged per block
    w, records = kquant(gguf_type, n, k, edges=edges)
    x = np.random.default_rng(1).standard_normal((9, k), dtype=np.float32)
    for m in range(1, 10):
        got, want = both(kind, w, records, x[:m])
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (gguf_type, kind, m)


def test_a_k_quant_layer_reads_records_and_fewer_bytes(tiled, monkeypatch):
    """The layer the loader builds (AffineLinear) takes the records for one-row calls (decode, where a step is
    bound by memory) and the float32 scales for more - except on q4ic (Q4_K where its tiles run), which reads them
    in every call; the switch turns records off with the same bits; Q4_K streams 0.59 bytes per weight, not 0.75,
    Q6_K 1.08, not 1.5."""
    n, k = 64, 1024
    for gguf_type, per_weight in (("Q4_K", 0.5 + 24 / 256), ("Q6_K", 1 + 20 / 256)):
        w, records = kquant(gguf_type, n, k)
        layer = AffineLinear(replace_records(w, records))
        assert layer.tiles is not None and layer.tiles.layout == records[0]
        t = layer.tiles
        if t.kind == "q4ic":
            assert t.single is None and t.fns == tiles.kernels("q4ic", 32, "k4") and t.chosen(1) == t.chosen(64)
        else:
            assert t.chosen(1) == t.single and t.chosen(2) != t.single
        assert (w.codes.nbytes + records[1].nbytes) / (n * k) == per_weight
        x = np.random.default_rng(2).standard_normal((3, k), dtype=np.float32)
        monkeypatch.setattr(cpu.SWITCHES, "superblock_scales", False)
        plain = AffineLinear(replace_records(w, records))
        monkeypatch.undo()
        assert plain.tiles is not None and plain.tiles.single is None
        for m in (1, 3):
            assert np.array_equal(layer.matmul(x[:m]), plain.matmul(x[:m]))


def test_the_kinds_without_a_record_reader_refuse_one():
    from fs_model.cpu import float_tiles, integer_tiles, packed_codes, vnni_superblock

    with pytest.raises(ValueError, match="4-bit groups of 32 only"):
        integer_tiles.microkernel(1, 1, 4, True, 64, "k4")
    with pytest.raises(ValueError, match="k4 super-block records, not k6"):
        vnni_superblock.microkernel(1, 1, "k6")
    with pytest.raises(ValueError, match="come with k6 super-block records, not k4"):
        packed_codes.microkernel(1, 1, 6, True, "k4")
    with pytest.raises(ValueError, match="bf16 weights have no scales"):
        float_tiles.microkernel("bf16", 1, 1, 0, 8, "k4")


def test_a_tile_group_of_k_quant_matrices_reads_each_ones_records(tiled, every_call):
    """gate and up (or q, k, v) of a Q4_K_M file in one call (tile_groups.py): each matrix through its own
    records, the same bits as each layer alone."""
    from fs_model.cpu.tile_groups import TileGroup

    k = 1024
    layers = [AffineLinear(replace_records(*kquant("Q4_K", n, k, seed=s))) for s, n in enumerate((64, 48, 80))]
    group = TileGroup.of(layers)
    assert group is not None and all(la.tiles.layout == "k4" for la in layers)
    q4ic = layers[0].tiles.kind == "q4ic"  # reads the records in every call: its tiles are the group's own
    assert (group.call.records is None) if q4ic else (group.call.records is not None)
    x = np.random.default_rng(3).standard_normal((5, k), dtype=np.float32)
    for m in (1, 5):
        for got, la in zip(group(x[:m]), layers, strict=True):
            assert np.array_equal(got, la.matmul(x[:m]))
