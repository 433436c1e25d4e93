import numpy as np
import pytest

from fs_weights import WeightsError, dequantize, quantize
from fs_weights.quantize import pack, unpack


def reference_dequantize(packed, scales, biases, bits, group):
    """Bit by bit, straight from the format description: element j lives in word j*bits//32."""
    rows, words = packed.shape
    n = words * 32 // bits
    out = np.zeros((rows, n), np.float64)
    for r in range(rows):
        for j in range(n):
            word = int(packed[r, (j * bits) // 32])
            q = (word >> ((j * bits) % 32)) & ((1 << bits) - 1)
            out[r, j] = float(scales[r, j // group]) * q + float(biases[r, j // group])
    return out


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_pack_unpack_roundtrip(bits):
    codes = np.random.default_rng(bits).integers(0, 1 << bits, (3, 64), dtype=np.uint8)
    packed = pack(codes, bits)
    assert packed.dtype == np.uint32 and packed.shape == (3, 64 * bits // 32)
    np.testing.assert_array_equal(unpack(packed, bits), codes)


@pytest.mark.parametrize("bits,group", [(4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128)])
def test_dequantize_matches_the_format_and_quantize_error_is_bounded(bits, group):
    rng = np.random.default_rng(bits * group)
    w = rng.standard_normal((5, 256)).astype(np.float32)
    packed, scales, biases = quantize(w, bits=bits, group_size=group)
    ours = dequantize(packed, scales, biases, bits=bits, group_size=group)
    np.testing.assert_allclose(ours, reference_dequantize(packed, scales, biases, bits, group), rtol=1e-6, atol=1e-6)
    step = np.repeat(np.abs(scales), group, axis=1)
    # mlx's rule pins the larger edge to an exact code, so the far edge may clip by up to one step (not half)
    assert np.all(np.abs(ours - w) <= step + 1e-6)


def test_negative_scales_are_honoured():
    packed = pack(np.array([[0, 1, 2, 3, 4, 5, 6, 7] * 4], np.uint8), 4)
    w = dequantize(packed, np.array([[-0.5]], np.float32), np.array([[1.0]], np.float32), bits=4, group_size=32)
    np.testing.assert_allclose(w[0, :8], [1.0, 0.5, 0.0, -0.5, -1.0, -1.5, -2.0, -2.5])


def test_bad_parameters():
    with pytest.raises(WeightsError, match="bits=3"):
        dequantize(np.zeros((1, 3), np.uint32), np.zeros((1, 1)), np.zeros((1, 1)), bits=3, group_size=32)
    with pytest.raises(WeightsError, match="does not match scales"):
        dequantize(np.zeros((1, 8), np.uint32), np.zeros((1, 3)), np.zeros((1, 3)), bits=4, group_size=32)
