"""fs's Q4_K writer (gguf_q4_k.py): the blocks it makes are what the ``gguf`` package's own dequantizer reads back
as close to the input as Q4_1 (the same min/max rule per 32, plus 6-bit scales); edge rows (all zero, one huge
sub-block beside small ones, all positive, all negative) stay finite and keep their sign and zeros; rows that are not
whole super-blocks are refused by name."""

import numpy as np
import pytest

from fs_weights.gguf_q4_k import BLOCK, q4_k_blocks

gguf = pytest.importorskip("gguf", reason="gguf is fs-weights' [gguf] extra")
T = gguf.GGMLQuantizationType


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_blocks_dequantize_as_close_as_q4_1():
    x = np.random.default_rng(0).standard_normal((96, 1024)).astype(np.float32) * np.float32(0.02)
    b = q4_k_blocks(x)
    assert b.shape == (96, 4 * BLOCK) and b.dtype == np.uint8
    got = gguf.quants.dequantize(b, T.Q4_K)
    q4_1 = gguf.quants.dequantize(gguf.quants.quantize(x, T.Q4_1), T.Q4_1)
    assert rel(got, x) <= 1.05 * rel(q4_1, x) and rel(got, x) < 0.09  # ~0.078 both for Gaussian rows


def test_edge_rows():
    x = np.zeros((5, 512), np.float32)
    x[1, :32] = 7.0  # one large sub-block beside small ones: theirs round to few scale steps, not to garbage
    x[1, 32:] = np.linspace(-0.01, 0.01, 480)
    x[2] = np.abs(np.linspace(1, 2, 512))  # all positive: the offset is 0, codes reach 15
    x[3] = -np.abs(np.linspace(1, 2, 512))  # all negative
    x[4, ::7] = 1e-3
    got = gguf.quants.dequantize(q4_k_blocks(x), T.Q4_K)
    assert np.isfinite(got).all()
    assert np.array_equal(got[0], np.zeros(512, np.float32))  # zeros stay zeros
    np.testing.assert_allclose(got[1, :32], 7.0, rtol=1e-3)
    assert np.abs(got[1, 32:] - x[1, 32:]).max() <= 0.011  # at most the sub-block's whole range off
    np.testing.assert_allclose(got[2], x[2], atol=(2 - 1) / 15)  # within a step of a 32-wide range
    np.testing.assert_allclose(got[3], x[3], atol=2 / 15)
    assert (got[2] > 0).all() and (got[3] < 0).all()


def test_rows_that_are_not_whole_super_blocks_are_refused():
    with pytest.raises(ValueError, match="whole super-blocks of 256 weights; this matrix has 384 columns"):
        q4_k_blocks(np.zeros((2, 384), np.float32))
