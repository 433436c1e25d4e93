"""GGUF's 5- and 6-bit codes kept in their bits (cpu/packed_codes.py): the packing is exact and refuses what it cannot
hold, the integer tiles - one output's codes in the lanes (q5i(w), q6i(w)) or 16 outputs' (q5ic, q6ic:
packed_columns.py) - meet their contract on the 0.6B shapes, give a row the same bits in every panel and from the
super-block records as from the float32 scales, and only the codes the file says are 5- or 6-bit, on CPUs that run
those tiles, are packed."""

from dataclasses import replace

import numpy as np
import pytest

from fs_model import cpu
from fs_model.cpu import packed_codes, tile_calls, tiles
from fs_model.cpu.affine import AffineLinear
from model_helpers import int8_activation_contract, need_tiles, rel_err
from test_superblock_scales import kquant, replace_records

pytestmark = pytest.mark.kernels

SHAPES = {"q_proj": (2048, 1024), "k/v_proj": (1024, 1024), "o_proj": (1024, 2048), "gate/up": (3072, 1024),
          "down": (1024, 3072), "odd rows": (37, 256)}  # fmt: skip
TYPES = {5: "Q5_K", 6: "Q6_K"}


@pytest.fixture
def tiled(reference):
    reference("numba")
    need_tiles("5- and 6-bit codes keep a byte each on the row kernels")
    if not tiles.applies("q6i", 1024, 16):
        pytest.skip("this CPU has no AVX2 + FMA: 5- and 6-bit codes keep a byte each on the row kernels")


def packed(bits, n, k, seed=0, edges=False):
    """(the 8-bit form the GGUF loader makes of a Q5_K / Q6_K matrix with its records, the same kept packed)."""
    w8 = replace_records(*kquant(TYPES[bits], n, k, seed=seed, edges=edges))
    wp = packed_codes.keep_packed(w8, bits)
    assert wp.bits == bits and wp.codes.shape == (n, k * bits // 8)
    return w8, wp


def compiled(kind):
    if tiles.kernels(kind, packed_codes.GROUP[int(kind[1])]) is None:
        pytest.skip(f"{kind} needs AVX-512 VNNI: this CPU runs {kind[:-1]}")
    return kind


KINDS = ["q5i", "q5iw", "q5ic", "q6i", "q6iw", "q6ic"]


def rows(kind, n):
    """The column kinds take whole blocks of 16 rows (a partial block keeps the other kinds: test_column_tiles)."""
    return -(-n // 16) * 16 if kind.endswith("c") else n


@pytest.mark.parametrize("bits", [5, 6])
def test_packing_round_trips_every_code_and_refuses_what_it_cannot_hold(bits):
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 1 << bits, (7, 256), dtype=np.uint8)
    codes[0], codes[1] = 0, (1 << bits) - 1  # every bit clear, every bit set
    p = packed_codes.pack(codes, bits)
    assert p.shape == (7, 256 * bits // 8) and np.array_equal(packed_codes.unpack(p, bits), codes)
    with pytest.raises(ValueError, match=f"codes below {1 << bits}"):
        packed_codes.pack(np.full((1, 64), 1 << bits, np.uint8), bits)  # a bit more would be lost
    with pytest.raises(ValueError, match="multiple of 64"):
        packed_codes.pack(np.zeros((1, 96), np.uint8), bits)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(SHAPES))
def test_packed_tiles_equal_their_contract(tiled, kind, name):
    """int8 activations per weight group (integer_tiles.py's quantities) to float32 rounding, and within the
    activation rounding of the float product of the dequantized weights."""
    n, k = SHAPES[name]
    n = rows(kind, n)
    w8, wp = packed(int(kind[1]), n, k)
    x = np.random.default_rng(1).standard_normal((5, k), dtype=np.float32) * np.float32(3)
    got = tiles.matmul(compiled(kind), replace(wp, records=None), x)
    assert rel_err(got, int8_activation_contract(wp, x)) < 1e-5
    assert rel_err(got, x.astype(np.float64) @ w8.dequantize().astype(np.float64).T) < 5e-2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("edges", [False, True])
def test_a_row_gets_the_same_bits_in_every_panel_from_records_or_scales(tiled, kind, edges, monkeypatch):
    """13 rows = panels of 4, 4, 4 and one; 6 = 4 + 2; one row alone: the same bits. The tile reading the records
    (every call, here) gives the bits of the one reading the float32 scales and biases, also at the edges (zero,
    subnormal and the largest float16 factors, sub-scales at their extremes)."""
    monkeypatch.setattr(tile_calls, "RECORD_ROWS", 64)
    _, wp = packed(int(kind[1]), rows(kind, 45), 512, edges=edges)
    x = np.random.default_rng(2).standard_normal((13, 512), dtype=np.float32)
    records, scales = tiles.Tiled(compiled(kind), wp), tiles.Tiled(kind, replace(wp, records=None))
    assert records.layout == wp.records[0] and scales.layout is None
    whole = scales(x)
    for lo, hi in ((0, 13), (0, 6), (5, 8), (12, 13), (3, 7)):
        assert np.array_equal(records(x[lo:hi]).view(np.uint32), whole[lo:hi].view(np.uint32))
        assert np.array_equal(scales(x[lo:hi]).view(np.uint32), whole[lo:hi].view(np.uint32))
    for r in range(13):
        assert np.array_equal(records(x[r : r + 1])[0], whole[r])


def test_only_codes_the_file_says_are_5_or_6_bit_are_packed(tiled, monkeypatch):
    """A Q6_K matrix the file says holds 6-bit codes is packed (0.83 bytes per weight in a decode step, the file's
    0.82, not 1.08); the same codes without that word, a Q4_K matrix or a type's wrong group are not; with int8
    activations off the packed tiles do not run, so codes keep a byte each - and a packed matrix handed to a layer
    then is unpacked, the same values."""
    w8, w6 = packed(6, 64, 1024)
    ids = np.array([[0, 63], [17, 31]])
    layer = AffineLinear(w6)
    assert layer.tiles is not None and layer.tiles.kind in ("q6i", "q6iw", "q6ic") and layer.tiles.layout == "k6"
    assert (w6.codes.nbytes + w6.records[1].nbytes) / (64 * 1024) == 0.75 + 20 / 256
    columns = layer.tiles.kind == "q6ic"  # the same codes and records, turned; no float32 scales beside them
    assert layer.w.columns == layer.w.lazy == columns
    assert layer.nbytes == (w6.codes.nbytes + w6.records[1].nbytes if columns else w6.nbytes)
    assert np.array_equal(layer.w.dequantize(), w8.dequantize()) and np.array_equal(layer.rows(ids), w8.rows(ids))
    q4 = replace_records(*kquant("Q4_K", 64, 1024))
    assert packed_codes.keep_packed(w8, None) is w8 and packed_codes.keep_packed(q4, 5) is q4
    assert packed_codes.keep_packed(w8, 5) is w8  # Q5's group is 32, this matrix's 16
    rows = np.array([3])
    assert np.array_equal(w6.dequantize(), w8.dequantize()) and np.array_equal(w6.rows(rows), w8.rows(rows))
    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", False)
    assert packed_codes.keep_packed(w8, 6) is w8
    plain = AffineLinear(w6)
    assert plain.w.bits == 8 and np.array_equal(plain.w.codes, w8.codes)
    x = np.random.default_rng(3).standard_normal((2, 1024), dtype=np.float32)
    assert np.array_equal(plain.matmul(x), AffineLinear(w8).matmul(x))


@pytest.mark.parametrize("kind", KINDS)
def test_float16_scales_give_the_bits_of_float32_ones(tiled, kind):
    """GGUF's Q5_0 / Q5_1 keep float16 factors: the packed tiles read them as float16 (half_scales.py) with the bits
    of float32 copies, in every panel."""
    _, wp = packed(int(kind[1]), rows(kind, 45), 512)
    half = replace(wp, records=None, scales=wp.scales.astype(np.float16), biases=wp.biases.astype(np.float16))
    held, widened = tiles.Tiled(compiled(kind), half), tiles.Tiled(kind, half.widened())
    x = np.random.default_rng(2).standard_normal((13, 512), dtype=np.float32)
    for lo, hi in ((0, 13), (0, 6), (5, 8), (12, 13)):
        assert np.array_equal(held(x[lo:hi]).view(np.uint32), widened(x[lo:hi]).view(np.uint32))
