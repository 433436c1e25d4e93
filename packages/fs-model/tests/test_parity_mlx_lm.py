"""Both backends against mlx-lm's own Qwen3 (its `load_model` + call on the same directory, MLX CPU)."""

import numpy as np
import pytest

from fs_model import load_model
from fs_weights import preset, write_random_checkpoint
from model_helpers import KNOBS, config, rel_err

pytestmark = pytest.mark.parity
IDS = [3, 141, 59, 265, 358, 97, 93, 238, 462, 64, 338, 327, 95, 28, 8, 419]


def mlx_lm_trace(path, ids, reference):
    mx = reference("mlx.core")
    base = reference("mlx_lm.models.base")
    model, _ = reference("mlx_lm.utils").load_model(path)
    x = model.model.embed_tokens(mx.array([ids]))
    out = {"embedding": x}
    mask = base.create_attention_mask(x, None)
    for i, layer in enumerate(model.model.layers):
        x = layer(x, mask, None)
        out[f"block.{i}"] = x
    out["final_norm"] = model.model.norm(x)
    out["logits"] = model(mx.array([ids]))
    return {k: np.array(v[0].astype(mx.float32)) for k, v in out.items()}, model


@pytest.mark.parametrize("backend", ["numpy", "mlx"])
@pytest.mark.parametrize("name", list(KNOBS))
def test_block_by_block_against_mlx_lm(checkpoints, reference, name, backend):
    want, _ = mlx_lm_trace(checkpoints[name], IDS, reference)
    got = load_model(checkpoints[name], backend=backend, dtype="float32").trace(IDS)
    for point in want:  # data-flow order: the first failure names the first diverging layer
        assert rel_err(got[point], want[point]) <= 1e-4, f"{name}/{backend}: first divergence at {point}"


@pytest.mark.parametrize("bits,group", [(4, 32), (8, 64)])
@pytest.mark.parametrize("backend", ["numpy", "mlx"])
def test_quantized_checkpoints_against_mlx_lm(tmp_path, reference, bits, group, backend):
    d = write_random_checkpoint(tmp_path / "q", config(), dtype="float32", quantize=bits, group_size=group)
    want, _ = mlx_lm_trace(d, IDS, reference)
    got = load_model(d, backend=backend, dtype="float32").forward(IDS)
    assert rel_err(np.asarray(got), want["logits"]) <= 1e-4


def test_mlx_backend_keeps_weights_quantized(tmp_path, reference):
    reference("mlx.core")
    d = write_random_checkpoint(tmp_path / "q", config(), dtype="float32", quantize=4, group_size=32)
    m = load_model(d, backend="mlx")
    lin = m.blocks[0].w["q_proj"]
    assert lin.scales is not None and lin.w.shape == (128, 64 * 4 // 32) and str(lin.w.dtype) == "mlx.core.uint32"


@pytest.mark.parametrize("kind", ["dense", "paged"])
def test_mlx_backend_cached_equals_uncached_and_matches_numpy(checkpoints, reference, kind):
    mx = reference("mlx.core")
    m = load_model(checkpoints["tied"], backend="mlx", dtype="float32")
    full = np.array(m.forward(IDS))
    cache = m.make_cache(kind, block_size=4)
    parts = [np.array(m.forward(IDS[:5], cache))] + [np.array(m.forward([t], cache)) for t in IDS[5:]]
    assert rel_err(np.concatenate(parts), full) <= 1e-5
    assert isinstance(cache[0].key_values[0], mx.array)
    np_model = load_model(checkpoints["tied"], backend="numpy")
    assert rel_err(full, np_model.forward(IDS)) <= 1e-5


def test_bf16_mlx_against_float32_numpy(tmp_path, reference):
    """bf16 keeps 8 mantissa bits (rel. rounding 2^-9 ≈ 0.002 per op); through 2 blocks the logits stay within
    5e-2 of max|logits| and the argmax agrees on almost every position. Stated in docs/model.md."""
    reference("mlx.core")
    d = write_random_checkpoint(tmp_path / "b", config(), dtype="bfloat16")
    ref = load_model(d, backend="numpy").forward(IDS)
    got = np.array(load_model(d, backend="mlx").forward(IDS).astype(__import__("mlx.core").core.float32))
    assert rel_err(got, ref) <= 5e-2
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.8


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["numpy", "mlx"])
def test_real_qwen3_0_6b_shapes(tmp_path_factory, reference, backend):
    d = tmp_path_factory.getbasetemp() / "qwen3-0.6b-f32"
    if not (d / "config.json").exists():
        write_random_checkpoint(d, preset("qwen3-0.6b"), dtype="float32")
    ids = [9707, 11, 1879, 0]
    want, _ = mlx_lm_trace(d, ids, reference)
    got = load_model(d, backend=backend, dtype="float32").trace(ids)
    for point in want:
        assert rel_err(got[point], want[point]) <= 1e-4, point
