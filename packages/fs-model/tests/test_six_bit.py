"""GGUF's Q6_K kept in 6 bits (cpu/six_bit.py): the packing is exact and refuses what it cannot hold, the integer
tiles meet their contract on the 0.6B shapes, give a row the same bits in every panel and from the super-block
records as from the float32 scales, and only Q6_K matrices on CPUs that run those tiles are packed."""

from dataclasses import replace

import numpy as np
import pytest

from fs_model import cpu
from fs_model.cpu import six_bit, tiles
from fs_model.cpu.affine import AffineLinear
from model_helpers import int8_activation_contract, rel_err
from test_superblock_scales import kquant, replace_records

pytestmark = pytest.mark.kernels

SHAPES = {"q_proj": (2048, 1024), "k/v_proj": (1024, 1024), "o_proj": (1024, 2048), "gate/up": (3072, 1024),
          "down": (1024, 3072), "odd rows": (37, 256)}  # fmt: skip


@pytest.fixture
def tiled(reference):
    reference("numba")
    if not tiles.applies("q6i", 1024, 16):
        pytest.skip("this CPU has no AVX2 + FMA: Q6_K keeps a byte per code on the row kernels")


def q6k(n, k, seed=0, edges=False):
    """(the 8-bit form the GGUF loader makes of a Q6_K matrix with its records, the same packed in 6 bits)."""
    w8 = replace_records(*kquant("Q6_K", n, k, seed=seed, edges=edges))
    w6 = six_bit.keep_packed(w8)
    assert w6.bits == 6 and w6.codes.shape == (n, k * 3 // 4)
    return w8, w6


def compiled(kind):
    if tiles.kernels(kind, 16) is None:
        pytest.skip(f"{kind} needs AVX-512 VNNI: this CPU runs q6i")
    return kind


def test_packing_round_trips_every_code_and_refuses_what_it_cannot_hold():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 64, (7, 256), dtype=np.uint8)
    codes[0], codes[1] = 0, 63  # every bit clear, every bit set
    packed = six_bit.pack(codes)
    assert packed.shape == (7, 192) and np.array_equal(six_bit.unpack(packed), codes)
    with pytest.raises(ValueError, match="codes below 64"):
        six_bit.pack(np.full((1, 64), 64, np.uint8))  # a 7th bit would be lost
    with pytest.raises(ValueError, match="multiple of 64"):
        six_bit.pack(np.zeros((1, 96), np.uint8))


@pytest.mark.parametrize("kind", ["q6i", "q6iw"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_six_bit_tiles_equal_their_contract(tiled, kind, name):
    """int8 activations per group of 16 (integer_tiles.py's quantities) to float32 rounding, and within the
    activation rounding of the float product of the dequantized weights."""
    n, k = SHAPES[name]
    w8, w6 = q6k(n, k)
    x = np.random.default_rng(1).standard_normal((5, k), dtype=np.float32) * np.float32(3)
    got = tiles.matmul(compiled(kind), replace(w6, records=None), x)
    assert rel_err(got, int8_activation_contract(w6, x)) < 1e-5
    assert rel_err(got, x.astype(np.float64) @ w8.dequantize().astype(np.float64).T) < 5e-2


@pytest.mark.parametrize("kind", ["q6i", "q6iw"])
@pytest.mark.parametrize("edges", [False, True])
def test_a_row_gets_the_same_bits_in_every_panel_from_records_or_scales(tiled, kind, edges, monkeypatch):
    """13 rows = panels of 4, 4, 4 and one; 6 = 4 + 2; one row alone: the same bits. The tile reading the k6
    records (every call, here) gives the bits of the one reading the float32 scales and biases, also at the edges
    (zero, subnormal and the largest float16 factors, sub-scales at -128 and 127)."""
    monkeypatch.setattr(tiles, "RECORD_ROWS", 64)
    _, w6 = q6k(45, 512, edges=edges)
    x = np.random.default_rng(2).standard_normal((13, 512), dtype=np.float32)
    records, scales = tiles.Tiled(compiled(kind), w6), tiles.Tiled(kind, replace(w6, records=None))
    assert records.layout == "k6" and scales.layout is None
    whole = scales(x)
    for lo, hi in ((0, 13), (0, 6), (5, 8), (12, 13), (3, 7)):
        assert np.array_equal(records(x[lo:hi]).view(np.uint32), whole[lo:hi].view(np.uint32))
        assert np.array_equal(scales(x[lo:hi]).view(np.uint32), whole[lo:hi].view(np.uint32))
    for r in range(13):
        assert np.array_equal(records(x[r : r + 1])[0], whole[r])


def test_only_q6_k_matrices_on_these_tiles_are_packed(tiled, monkeypatch):
    """Q6_K (k6 records) is packed; a Q4_K matrix and an MLX 8-bit one are not; with int8 activations off the 6-bit
    tiles do not run, so Q6_K keeps its byte per code - and a 6-bit matrix handed to a layer then is unpacked, the
    same values. A packed layer reads 0.83 bytes per weight in a decode step, the file's 0.82, not 1.08."""
    w8, w6 = q6k(64, 1024)
    layer = AffineLinear(w6)
    assert layer.tiles is not None and layer.tiles.kind in ("q6i", "q6iw") and layer.tiles.layout == "k6"
    assert (w6.codes.nbytes + w6.records[1].nbytes) / (64 * 1024) == 0.75 + 20 / 256
    q4 = replace_records(*kquant("Q4_K", 64, 1024))
    assert six_bit.keep_packed(q4) is q4 and six_bit.keep_packed(replace(w8, records=None)).bits == 8
    assert np.array_equal(w6.dequantize(), w8.dequantize()) and np.array_equal(
        w6.rows(np.array([3])), w8.rows(np.array([3]))
    )
    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", False)
    assert six_bit.keep_packed(w8) is w8
    plain = AffineLinear(w6)
    assert plain.w.bits == 8 and np.array_equal(plain.w.codes, w8.codes)
    x = np.random.default_rng(3).standard_normal((2, 1024), dtype=np.float32)
    assert np.array_equal(plain.matmul(x), AffineLinear(w8).matmul(x))
