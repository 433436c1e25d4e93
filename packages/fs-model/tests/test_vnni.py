"""The integer (AVX-512 VNNI) 4-bit decode kernel against its contract, computed exactly in numpy int64/float64."""

import numpy as np
import pytest

from fs_model.cpu import affine, vnni
from fs_model.cpu.affine import AffineLinear
from model_helpers import cpu_name, rel_err
from model_helpers import int8_activation_contract as contract

pytestmark = pytest.mark.kernels  # needs numba (the kernels session installs fs-model[fast])

SHAPES = {
    "q_proj": (2048, 1024),
    "k/v": (1024, 1024),
    "o_proj": (1024, 2048),
    "gate/up": (3072, 1024),
    "down": (1024, 3072),
    "few rows": (37, 256),
    "one row": (1, 128),
}


@pytest.fixture(autouse=True)
def _vnni(reference):
    reference("numba")
    if not vnni.AVAILABLE:
        pytest.skip(f"{cpu_name()} has no AVX-512 VNNI: decode uses the float kernels (test_kernels.py)")


@pytest.mark.parametrize("name", list(SHAPES))
def test_integer_kernel_equals_its_contract_exactly(name):
    rng = np.random.default_rng(len(name))
    n, k = SHAPES[name]
    w = affine.quantize_affine(rng.standard_normal((n, k), dtype=np.float32), bits=4, group=64)
    for m in (1, 3, 8):  # a decode step of a batch of m rows
        x = rng.standard_normal((m, k), dtype=np.float32) * np.float32(3)
        assert vnni.applies(4, 64, k)
        got = AffineLinear(w)(x)  # the route decode takes
        assert rel_err(got, contract(w, x)) < 1e-5
        # the activation rounding is the only approximation: a few % of the float-activation result (worst for few
        # inputs: 3.3 % at k = 128)
        assert rel_err(got, x.astype(np.float64) @ w.dequantize().T.astype(np.float64)) < 5e-2


def test_what_takes_the_float_kernels():
    assert not vnni.applies(8, 64, 1024)  # 8-bit: the float kernel is as fast and keeps float activations
    assert not vnni.applies(4, 32, 1024) and not vnni.applies(4, 128, 1024)  # other group sizes
    assert not vnni.applies(4, 64, 192)  # three groups: the planar tail group is not a 64-byte pair
