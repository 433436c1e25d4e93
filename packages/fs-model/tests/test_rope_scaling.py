"""config.json's ``rope_scaling`` (rope_scaling.py): YaRN - Qwen3's documented way past 32k - and linear, on the
numpy reference, the CPU kernels and MLX, against mlx-lm's own ``YarnRoPE`` / scaled ``nn.RoPE`` at positions past
``original_max_position_embeddings``; the scaled context is the limit; what fs does not compute is refused by name."""

import numpy as np
import pytest

from fs_model import ModelError, load_model
from fs_weights import write_random_checkpoint
from model_helpers import config, rel_err

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
LONG = [int(i) for i in np.random.default_rng(0).integers(0, 512, 120)]  # 120 positions: well past 32


@pytest.fixture(scope="module")
def yarn_dir(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("yarn") / "f32", config(rope_scaling=YARN), dtype="float32")


@pytest.mark.parity
@pytest.mark.parametrize("backend", ["numpy", "mlx"])
@pytest.mark.parametrize("scaling", [YARN, {"rope_type": "linear", "factor": 2.0}], ids=["yarn", "linear"])
def test_scaled_rope_equals_mlx_lms_past_the_original_context(tmp_path, reference, backend, scaling):
    mx = reference("mlx.core")
    from mlx_lm.utils import load_model as mlx_load_model

    d = write_random_checkpoint(tmp_path / "m", config(rope_scaling=scaling), dtype="float32")
    ref, _ = mlx_load_model(d)
    want = np.array(ref(mx.array([LONG]))[0].astype(mx.float32))
    got = np.asarray(load_model(d, backend=backend, dtype="float32").forward(LONG))
    assert rel_err(got, want) <= 1e-4  # float32 weights
    plain = np.asarray(load_model(write_random_checkpoint(tmp_path / "p", config(), dtype="float32"),
                                  dtype="float32").forward(LONG))  # fmt: skip
    assert rel_err(plain, want) > 1e-2  # the scaling changes the answer: the test would see it ignored


def test_yarn_raises_the_context_to_factor_times_the_original(yarn_dir):
    m = load_model(yarn_dir, dtype="float32")
    assert m.config.max_position_embeddings == 512  # config(): 512 already >= 4 * 32
    big = write_random_checkpoint(yarn_dir.parent / "big", config(rope_scaling=YARN | {"factor": 32.0}),
                                  dtype="float32")  # fmt: skip
    assert load_model(big, dtype="float32").config.max_position_embeddings == 32 * 32


@pytest.mark.kernels
def test_the_cpu_kernels_run_yarn_like_the_reference(tmp_path):
    from fs_model import cpu

    if not cpu.HAVE_NUMBA:
        pytest.fail("the kernels session installs numba")
    d = write_random_checkpoint(tmp_path / "bf16", config(rope_scaling=YARN), dtype="bfloat16")
    fast = np.asarray(load_model(d).forward(LONG))  # bf16 kept: the fused kernels take RoPE's tables
    ref = np.asarray(load_model(d, dtype="float32").forward(LONG))
    assert rel_err(fast, ref) <= 1e-2  # bf16 tolerance


@pytest.mark.parametrize(
    "scaling,words",
    [
        ({"rope_type": "dynamic", "factor": 2.0}, "type 'dynamic' is not implemented"),
        ({"type": "longrope", "factor": 2.0}, "type 'longrope' is not implemented"),
        ({"rope_type": "yarn", "factor": 4.0}, "original_max_position_embeddings must be a positive int"),
        ({"rope_type": "yarn", "factor": 0.5, "original_max_position_embeddings": 32}, "factor must be a number >= 1"),
        ({"rope_type": "linear", "factor": "2"}, "factor must be a number >= 1"),
        (YARN | {"beta_fast": "x"}, "beta_fast must be a number"),
    ],
)
def test_what_fs_does_not_compute_is_refused_by_name(tmp_path, scaling, words):
    d = write_random_checkpoint(tmp_path / "bad", config(rope_scaling=scaling), dtype="float32")
    with pytest.raises(ModelError, match=words):
        load_model(d)
