"""The 4-bit tile with 16 output columns in the lanes (cpu/column_tiles.py, ``q4ic``: an AVX-512 VNNI body and an
AVX2 one): its layout round-trips, it computes the int8-activation contract on every 0.6B shape, a row's bits never
depend on the other rows, 16-bit scales read in place give the bits of float32 ones, both bodies give the same bits,
and a layer keeps one copy of its codes - the column layout - wherever every call takes these tiles. A tile that
reads one lane's codes for another, mixes up the nibble planes or indexes the per-16-row scales by row would fail
the contract by orders of magnitude."""

from dataclasses import replace

import numpy as np
import pytest

from fs_model import cpu
from fs_model.cpu import column_records, column_tiles, half_scales, tiles
from fs_model.cpu.affine import AffineLinear, AffineWeight, _unplanar, quantize_affine
from fs_weights import f32_to_bf16
from model_helpers import cpu_name, int8_activation_contract, need_tiles, rel_err

pytestmark = pytest.mark.kernels

SHAPES = {"q_proj": (2048, 1024), "k/v_proj": (1024, 1024), "o_proj": (1024, 2048), "gate/up": (3072, 1024),
          "down": (1024, 3072), "one block": (16, 128)}  # fmt: skip


def weight(n, k, seed=0, G=64):
    return quantize_affine(np.random.default_rng(seed).standard_normal((n, k), dtype=np.float32), 4, G)


def symmetric(bits, n, k, G, seed=0):
    """A matrix as the GGUF loader keeps a Q4_0 (bits 4) or Q5_0 (5, packed codes) one: float16 factors d and
    biases -2^(bits-1)·d, float16 too; the factors include 0 (a bias of -0), a subnormal and 4000 (-16 · 4000 still
    fits float16)."""
    if bits == 4:
        w = weight(n, k, seed, G)
    else:
        from test_packed_codes import packed

        w = replace(packed(bits, n, k, seed)[1], records=None)
        assert w.group_size == G
    d = np.random.default_rng(seed).uniform(-2e-2, 2e-2, w.scales.shape).astype(np.float16)
    d.reshape(-1)[:4] = [0.0, 6e-8, 4000.0, -3e-5]
    b = (d.astype(np.float32) * np.float32(-(1 << (bits - 1)))).astype(np.float16)
    return replace(w, scales=d, biases=b)


@pytest.fixture
def columns(reference):
    reference("numba")
    need_tiles("4-, 5- and 6-bit weights run the row kernels (test_kernels.py)")
    if tiles.kernels(column_tiles.KIND, 64) is None:
        pytest.skip(f"{cpu_name()} has no AVX2 + FMA: no tiles, the row kernels run")


@pytest.mark.parametrize("G", [64, 32])
def test_the_layout_round_trips_and_keeps_the_bytes(G):
    w = weight(48, 256, G=G)
    c = w.in_columns()
    assert c.columns and c.codes.shape == w.codes.shape and c.scales.shape == w.scales.shape
    back = c.in_rows()
    for a, b in ((back.codes, w.codes), (back.scales, w.scales), (back.biases, w.biases)):
        assert np.array_equal(a, b)
    # byte 4l + j of a group's first pair: row l's inputs j (low nibble) and 4 + j (high nibble)
    codes = _unplanar(w.codes, G)  # [n, k], one code a byte
    first = c.codes[:16].reshape(-1)[:64]
    assert np.array_equal(first & 15, codes[:16, :4].reshape(-1))
    assert np.array_equal(first >> 4, codes[:16, 4:8].reshape(-1))
    ids = np.array([[0, 47], [17, 31]])
    assert np.array_equal(c.rows(ids), w.rows(ids)) and np.array_equal(c.dequantize(), w.dequantize())
    odd = weight(32, 3 * G, seed=5, G=G)  # an odd number of groups: the planar layout's last group is its own
    assert np.array_equal(odd.in_columns().in_rows().codes, odd.codes)
    assert np.array_equal(odd.in_columns().dequantize(), odd.dequantize())
    # an embedding's lookup reads the rows in place (column_tiles.lookup): every row, any scale storage, the bits
    # of dequantize - a lane, nibble or pair off by one moves values by whole steps
    for to in (None, f32_to_bf16, lambda a: a.astype(np.float16)):
        for m in (w, odd):
            h = m if to is None else AffineWeight(m.codes, to(m.scales), to(m.biases), 4, G)
            every = np.arange(h.shape[0])[::-1].reshape(2, -1)
            got = h.in_columns().rows(every)
            assert got.shape == (2, h.shape[0] // 2, h.shape[1])
            assert np.array_equal(got.reshape(h.shape[0], -1)[::-1].view(np.uint32), h.dequantize().view(np.uint32))


@pytest.mark.parametrize("G", [64, 32])
@pytest.mark.parametrize("name", list(SHAPES))
def test_q4ic_is_the_int8_activation_contract(columns, name, G):
    """Groups of 64 (MLX's 4-bit) and 32 (GGUF's Q4_0 / Q4_1, int8 activations per group of 32)."""
    n, k = SHAPES[name]
    w = weight(n, k, G=G)
    x = np.random.default_rng(1).standard_normal((5, k), dtype=np.float32) * np.float32(3)
    got = tiles.matmul(column_tiles.KIND, w, x)
    assert got.dtype == np.float32 and got.shape == (5, n)
    assert rel_err(got, int8_activation_contract(w, x)) < 1e-5
    assert rel_err(got, x.astype(np.float64) @ w.dequantize().astype(np.float64).T) < 5e-2


@pytest.mark.parametrize("G", [64, 32])
@pytest.mark.parametrize("layout", [None, "bf16", "f16"])
def test_a_row_gets_the_same_bits_in_every_panel_and_16_bit_scales_are_read_as_stored(columns, layout, G):
    """13 rows = panels of 4, 4, 4 and a lone row; any slice, and each row alone, the same bits; bf16 / float16
    scales and biases read in place give the bits of their float32 copies."""
    w = weight(64, 512, seed=2, G=G)
    if layout is not None:
        to = (lambda a: f32_to_bf16(a)) if layout == "bf16" else (lambda a: a.astype(np.float16))
        w = AffineWeight(w.codes, to(w.scales), to(w.biases), 4, G)
    x = np.random.default_rng(2).standard_normal((13, 512), dtype=np.float32)
    whole = tiles.matmul(column_tiles.KIND, w, x)
    for lo, hi in ((0, 6), (5, 8), (12, 13), (3, 7)):
        assert np.array_equal(tiles.matmul(column_tiles.KIND, w, x[lo:hi]), whole[lo:hi])
    for r in range(13):
        assert np.array_equal(tiles.matmul(column_tiles.KIND, w, x[r : r + 1])[0], whole[r])
    if layout is not None:
        assert np.array_equal(whole, tiles.matmul(column_tiles.KIND, w.widened(), x))


@pytest.mark.parametrize("bits, G", [(4, 32), (4, 64), (5, 32)])
def test_symmetric_groups_read_only_their_scales(columns, bits, G):
    """GGUF's Q4_0 / Q5_0: every bias is its scale times -2^(bits-1), so the tiles read the float16 scales alone and
    make each bias in a register (half_scales.SYMMETRIC) - with the bits of the stored biases, in every panel. A
    bias one float16 step off, or one that overflowed to inf, and the matrix reads its biases as stored."""
    kind = f"q{bits}ic"
    w = symmetric(bits, 64, 512, G, seed=7)
    x = np.random.default_rng(7).standard_normal((13, 512), dtype=np.float32)
    made, stored = tiles.Tiled(kind, w), tiles.Tiled(kind, w.widened())
    assert made.fns == tiles.kernels(kind, G, half_scales.SYMMETRIC) != stored.fns
    for lo, hi in ((0, 13), (0, 6), (5, 8), (12, 13)):
        assert np.array_equal(made(x[lo:hi]).view(np.uint32), stored(x[lo:hi]).view(np.uint32))
    off = w.biases.copy()
    off.view(np.uint16)[3, 1] ^= 1  # the last bit of one bias
    near = replace(w, biases=off)
    assert tiles.Tiled(kind, near).fns == tiles.kernels(kind, G, "f16")
    assert np.array_equal(tiles.Tiled(kind, near)(x), tiles.Tiled(kind, near.widened())(x))
    big = w.scales.copy()
    big[0, 0] = 9000.0  # -8 · 9000 is no float16: a file's bias would be inf
    with np.errstate(over="ignore"):
        inf = (big.astype(np.float32) * -(1 << (bits - 1))).astype(np.float16)
    assert np.isinf(inf[0, 0]) and not half_scales.symmetric(big, inf, bits)


def test_a_layer_keeps_only_the_column_layout_where_every_call_takes_q4ic(columns, monkeypatch):
    x = np.random.default_rng(3).standard_normal((3, 256), dtype=np.float32)
    w = weight(32, 256)
    layer = AffineLinear(w)
    assert layer.tiles is not None and layer.tiles.kind == "q4ic" and layer.w.columns  # no planar copy beside it
    assert layer.tiles.w is layer.w and layer.kind == "q4i"
    ids = np.array([3, 30])
    assert np.array_equal(layer.rows(ids), w.rows(ids)) and layer.nbytes == w.nbytes
    assert np.array_equal(layer.matmul(x), tiles.matmul("q4ic", w, x))
    partial = AffineLinear(weight(40, 256))  # a partial 16-row block: q4iw (q4i on AVX2), planar
    assert partial.tiles is not None and partial.tiles.kind in ("q4iw", "q4i") and not partial.w.columns
    monkeypatch.setattr(cpu.SWITCHES, "batch_invariant", False)  # other paths read the rows: planar, q4iw
    assert not AffineLinear(w).w.columns
    monkeypatch.setattr(cpu.SWITCHES, "batch_invariant", True)
    monkeypatch.setattr(cpu.SWITCHES, "column_tiles", False)  # FS_COLUMN_TILES=0
    off = AffineLinear(w)
    assert off.tiles is not None and off.tiles.kind in ("q4iw", "q4i") and not off.w.columns


def test_a_q4_k_layer_reads_its_records_arranged_per_16_rows(columns, monkeypatch):
    """A GGUF Q4_K matrix (super-block records: column_records.py) on q4ic: the records turned per block of 16 rows
    (a block's 16 d factors first, then 16 m, then each group's 16 sub-scales), every call reading them, with the
    bits of its float32 scales (``FS_SUPERBLOCK_SCALES=0``); rows and dequantize see the planar matrix."""
    from test_superblock_scales import kquant

    w, records = kquant("Q4_K", 48, 512, edges=True)
    w = replace(w, records=records)
    c = w.in_columns()
    assert c.records is not None and c.records[0] == "k4" and c.records[1].shape == records[1].shape
    assert np.array_equal(c.in_rows().records[1], records[1])
    block = c.records[1][:16].reshape(-1)[: 16 * 24]  # rows 0-15, super-block 0
    assert np.array_equal(block[:64].reshape(16, 4), records[1][:16, 0:4])  # d of each row
    assert np.array_equal(block[128:256].reshape(8, 16), records[1][:16, 8:16].T)  # sc: a group's 16 rows adjacent
    layer = AffineLinear(w)
    assert layer.tiles is not None and layer.tiles.kind == "q4ic" and layer.w.columns and layer.tiles.single is None
    # the records are all it keeps of the scales: 0.5 + 24/256 bytes a weight, not 0.84 with float32 copies
    assert layer.w.lazy and layer.nbytes == w.codes.nbytes + records[1].nbytes < w.nbytes
    ids = np.array([[0, 47], [17, 31]])
    assert np.array_equal(layer.rows(ids), w.rows(ids)) and np.array_equal(layer.w.dequantize(), w.dequantize())
    x = np.random.default_rng(5).standard_normal((9, 512), dtype=np.float32)
    monkeypatch.setattr(cpu.SWITCHES, "superblock_scales", False)
    plain = AffineLinear(w)
    assert plain.tiles is not None and plain.tiles.kind == "q4ic" and plain.tiles.fns != layer.tiles.fns
    assert not plain.w.lazy  # the float32 parts are what it reads
    for m in (1, 2, 9):
        assert np.array_equal(layer.matmul(x[:m]), plain.matmul(x[:m]))
    assert rel_err(layer.matmul(x), int8_activation_contract(w, x)) < 1e-5


@pytest.mark.parametrize("bits", [5, 6])
def test_packed_codes_in_columns_round_trip_and_keep_the_bytes(bits):
    """GGUF's 5- and 6-bit codes (packed_columns.py): a group's nibbles as q4ic's, then its top bits, the same
    bytes; back to packed rows exactly (every code 0 and 2^bits - 1 in some row)."""
    from fs_model.cpu import packed_codes, packed_columns

    G = packed_codes.GROUP[bits]
    codes = np.random.default_rng(6).integers(0, 1 << bits, (48, 256), dtype=np.uint8)
    codes[0], codes[1] = 0, (1 << bits) - 1
    rows = packed_codes.pack(codes, bits)
    c = packed_columns.arrange(rows, bits)
    assert c.shape == rows.shape and np.array_equal(packed_columns.planar(c, bits), rows)
    block = c[:16].reshape(-1)  # rows 0-15, group 0: pair 0 then the top bits (chunk q at 2q or q of each byte)
    assert np.array_equal(block[:64] & 15, (codes[:16, :4] & 15).reshape(-1))
    assert np.array_equal(block[:64] >> 4, (codes[:16, 4:8] & 15).reshape(-1))
    width = bits - 4
    top = block[8 * G : 8 * G + 64]
    assert np.array_equal(top & ((1 << width) - 1), (codes[:16, :4] >> 4).reshape(-1))  # chunk 0's top bits
    assert np.array_equal((top >> width) & ((1 << width) - 1), (codes[:16, 4:8] >> 4).reshape(-1))  # chunk 1's


@pytest.mark.parametrize(
    "G, layout, bits",
    [(64, None, 4), (32, None, 4), (32, "k4", 4), (32, "k4", 5), (16, "k6", 6), (16, None, 6), (32, "f16sym", 4),
     (32, "f16sym", 5)],
)  # fmt: skip
def test_the_avx2_body_gives_the_vnni_bodys_bits(columns, G, layout, bits):
    """Both bodies sum each group's products exactly in integers (VNNI: ``vpdpbusd``; AVX2: ``vpmaddubsw`` pairs
    added as int16 over 8 chunks, then ``vpmaddwd``) and share the float chain, so an AVX2 host computes what an
    AVX-512 one does. Run where this CPU has VNNI (its own pass compiles the other body here)."""
    import ctypes

    from fs_model.cpu import integer_tiles
    from fs_model.cpu.llvm_ir import compile_ir

    if not cpu.FEATURES.issuperset(tiles.VNNI_FEATURES):
        pytest.skip(f"{cpu_name()}: no AVX-512 VNNI here, so only the AVX2 body runs (the other tests check it)")
    MRs = sorted({MR for _, MR in tiles.TILES[column_tiles.KIND]})
    ir = integer_tiles.DECLARATIONS + column_tiles.source(MRs, G, layout, 8, bits)
    names = [column_tiles.name(MR, G, layout, bits) for MR in MRs]
    ir += column_tiles.microkernel(4, G, layout, 8, bits, lead=True)  # a few-row call's later 4-row panels
    names.append(lead := column_tiles.name(4, G, layout, bits, lead=True))
    fns = compile_ir(ir, ("avx2", "fma"), dict.fromkeys(names, tiles._SIG))
    assert fns is not None
    at = {n: ctypes.cast(fns[n], ctypes.c_void_p).value for n in names}
    from fs_model.cpu import packed_codes
    from test_superblock_scales import kquant

    w = weight(64, 512, seed=4, G=G)
    if layout == half_scales.SYMMETRIC:  # Q4_0 / Q5_0
        w = symmetric(bits, 64, 512, G, seed=4)
    elif layout is not None or bits != 4:  # a K-quant matrix (records: column_records.py), 5-/6-bit codes packed
        plain, records = kquant({4: "Q4_K", 5: "Q5_K", 6: "Q6_K"}[bits], 64, 512, seed=4)
        w = replace(packed_codes.keep_packed(plain, bits) if bits != 4 else plain, records=records if layout else None)
    kind = f"q{bits}ic"
    x = np.random.default_rng(4).standard_normal((9, 512), dtype=np.float32)
    vnni = tiles.Tiled(kind, w)
    avx2 = tiles.Tiled(kind, w)
    assert vnni.layout == (layout if layout in column_records.LAYOUTS else None)
    if layout == half_scales.SYMMETRIC:
        assert vnni.fns == tiles.kernels(kind, G, layout)
    avx2.fns = tuple(at[column_tiles.name(MR, G, layout, bits)] for _, MR in tiles.TILES[kind] for _ in (0, 1))
    avx2.fns += (avx2.fns[0], at[lead])  # no quiet twin (tiles.QUIET): the 4-row tile again; the one hinting ahead
    avx2.call = avx2.calls([avx2])
    assert avx2.fns != vnni.fns
    for m in (9, 7, 1):  # 9: a second 4-row panel (the tile hinting the next block), 7: then 2 and 1 rows
        assert np.array_equal(avx2(x[:m]), vnni(x[:m]))


@pytest.mark.parametrize("layout", [None, "bf16", half_scales.SYMMETRIC])
def test_a_few_row_calls_later_panels_hint_the_next_block(columns, layout):
    """A 4-row panel after a call's first finds its block in cache; the first panel's hints (AHEAD bytes on, inside
    the block) leave memory idle while it computes. In a call of at most FETCHING_ROWS rows those panels take the
    twin that hints the same group of the next 16-row block - its codes, scales and biases - so the next item
    streams in meanwhile (column_tiles.LEAD says how much that gains); longer calls keep the plain tile. The twin
    changes no bit (the panel tests above); only this catches it going unused or hinting the wrong bytes."""
    from fs_model.cpu.tile_loops import FETCHING_ROWS, panel_set

    t = tiles.Tiled(column_tiles.KIND, weight(64, 512, seed=2, G=64))
    few, many = panel_set(t.fns, t.NRs, 8)[0], panel_set(t.fns, t.NRs, FETCHING_ROWS + 1)[0]
    assert few[-1] == t.fns[9] != t.fns[0] and many[-1] == t.fns[8] == t.fns[0] and few[0] == t.fns[0]
    ir = column_tiles.microkernel(4, 64, layout, 16, 4, lead=True)
    block = "%blk = mul i64 %groups, 512"  # 16 rows x 64 inputs x 4 bits: one group's codes
    assert block in ir and ir.count("@llvm.prefetch") == 8 + (1 if layout == half_scales.SYMMETRIC else 2)
    size = 4 if layout is None else 2  # the scales' and biases' [k/G, 16] per block: 16 values a group
    assert f"%sb.o = mul i64 %groups, {16 * size}" in ir and f"%sg.o = mul i64 %g, {16 * size}" in ir
