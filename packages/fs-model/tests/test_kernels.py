"""The bf16 CPU kernels against the float32 reference: every Qwen3-0.6B matrix shape and some odd ones."""

import numpy as np
import pytest

from fs_model import load_model
from fs_model.numpy import kernels
from fs_weights import f32_to_bf16, write_random_checkpoint
from model_helpers import config, rel_err

SHAPES = {
    "q_proj": (2048, 1024),
    "k_proj/v_proj": (1024, 1024),
    "o_proj": (1024, 2048),
    "gate/up": (3072, 1024),
    "down": (1024, 3072),
    "odd": (37, 129),
    "one row": (1, 7),
    "not a block multiple": (17, 1000),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_matvec_bf16_equals_widened_float32(name):
    rng = np.random.default_rng(len(name))
    out, inp = SHAPES[name]
    w = f32_to_bf16(rng.standard_normal((out, inp), dtype=np.float32))
    x = rng.standard_normal(inp, dtype=np.float32)
    want = kernels.widen(w).astype(np.float64) @ x.astype(np.float64)
    got = kernels.matvec_bf16(w, x)
    assert got.dtype == np.float32 and got.shape == (out,)
    assert rel_err(got, want) < 1e-5
    xs = rng.standard_normal((2, 3, inp), dtype=np.float32)  # decode-sized and prefill-sized inputs
    for rows in (xs[:1, :1], xs):
        np.testing.assert_allclose(kernels.linear_bf16(rows, w), rows @ kernels.widen(w).T, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_matvec_bf16_lm_head_shape():
    rng = np.random.default_rng(0)
    w = f32_to_bf16(rng.standard_normal((151936, 1024), dtype=np.float32))
    x = rng.standard_normal(1024, dtype=np.float32)
    assert rel_err(kernels.matvec_bf16(w, x), kernels.widen(w) @ x) < 1e-5


def test_bf16_weights_in_memory_give_the_reference_logits(tmp_path):
    d = write_random_checkpoint(tmp_path / "m", config("tied"), dtype="bfloat16")
    ref, fast = load_model(d), load_model(d, dtype="bfloat16")
    assert fast.blocks[0].mlp.gate.dtype == np.uint16 and not fast.blocks[0].mlp.gate.flags.writeable  # the mmap
    ids = [3, 141, 59, 265, 358, 97]
    assert rel_err(fast.forward(ids), ref.forward(ids)) < 1e-5
    a, b = ref.make_cache(), fast.make_cache()
    ref.forward(ids, a), fast.forward(ids, b)
    for t in (7, 99, 3):
        assert rel_err(fast.forward([t], b), ref.forward([t], a)) < 1e-5


@pytest.mark.parity  # the parity session installs every extra, numba included; its absence there is a failure
@pytest.mark.parametrize("name", list(SHAPES))
def test_numba_kernel_itself(reference, name):
    reference("numba")
    assert kernels.HAVE_NUMBA
    rng = np.random.default_rng(7)
    out, inp = SHAPES[name]
    w = f32_to_bf16(rng.standard_normal((out, inp), dtype=np.float32))
    x = rng.standard_normal(inp, dtype=np.float32)
    got = np.empty(out, np.float32)
    kernels._matvec_bf16(w, x, got)
    assert rel_err(got, kernels.widen(w).astype(np.float64) @ x) < 1e-5
