"""silu(g) · u on the vector kernel (cpu/silu_tiles.py) against mlp.py's numpy silu: within float32 rounding of
the polynomial exponential (2 ulp), at the edges (large |g|, ±0) too, for rows read in place from a wider array
(a layer's gate | up output); the scalar loop where the kernel does not apply agrees as well. A wrong sign in the
exponent, a missing 1 + or u applied twice fails by orders of magnitude."""

import numpy as np
import pytest

from fs_model.cpu import silu_tiles
from fs_model.numpy.mlp import silu

pytestmark = pytest.mark.kernels


@pytest.fixture(autouse=True)
def _numba(reference):
    reference("numba")


def cases(m=4, I=256):
    rng = np.random.default_rng(m)
    g = (rng.standard_normal((m, I)) * 6).astype(np.float32)
    g[0, :7] = [-100.0, -60.0, 100.0, 0.0, -0.0, 60.0, 1e-30]
    return g, rng.standard_normal((m, I)).astype(np.float32)


def test_the_kernel_is_numpys_silu_within_float32_rounding():
    g, u = cases()
    if not silu_tiles.kernel(g.shape[1]):
        pytest.skip("no tile (no AVX2 + FMA, or FS_TILES=0): the scalar loop runs (the next test)")
    got, want = silu_tiles.silu_mul(g, u), silu(g) * u
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)
    assert got[0, 0] == 0.0 and np.signbit(got[0, 0]) == np.signbit(want[0, 0])  # -100: exp overflows, -0·u
    gu = np.concatenate([g, u], axis=1)[:1]  # one row of a gate | up output: both halves read in place
    assert np.array_equal(silu_tiles.silu_mul(gu[:, :256], gu[:, 256:]), got[:1])


def test_the_loop_where_the_kernel_does_not_apply_agrees():
    g, u = cases(I=100)  # not a multiple of the vector width: the loop, decided by the width alone
    assert silu_tiles.kernel(100) == 0
    np.testing.assert_allclose(silu_tiles.silu_mul(g, u), silu(g) * u, rtol=1e-6, atol=1e-30)
