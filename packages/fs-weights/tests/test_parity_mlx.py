"""fs_weights against mlx / mlx-lm: quantization layout, dtype conversion, and checkpoints mlx-lm accepts."""

import os

import numpy as np
import pytest

from fs_weights import Checkpoint, dequantize, preset, quantize, write_random_checkpoint

pytestmark = pytest.mark.parity
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_dequantize_equals_mx_dequantize_in_float32(bits, group, reference):
    mx = reference("mlx.core")
    w = mx.array(np.random.default_rng(bits + group).standard_normal((48, 256)).astype(np.float32))
    packed, scales, biases = mx.quantize(w, group_size=group, bits=bits)
    want = np.array(mx.dequantize(packed, scales, biases, group_size=group, bits=bits))
    got = dequantize(np.array(packed), np.array(scales), np.array(biases), bits=bits, group_size=group)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    ours = quantize(np.array(w), bits=bits, group_size=group)  # our packing is mlx's packing
    back = mx.dequantize(*(mx.array(a) for a in ours), group_size=group, bits=bits)
    np.testing.assert_allclose(np.array(back), dequantize(*ours, bits=bits, group_size=group), atol=1e-6)


def test_bf16_conversion_equals_mlx(tmp_path, reference):
    mx = reference("mlx.core")
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 100
    theirs = mx.array(x).astype(mx.bfloat16)
    mx.save_safetensors(str(tmp_path / "b.safetensors"), {"x": theirs})
    ck = Checkpoint.open(tmp_path / "b.safetensors")
    assert ck.info("x").dtype == "BF16"
    np.testing.assert_array_equal(ck.get("x"), np.array(theirs.astype(mx.float32)))


@pytest.mark.parametrize(
    "kw",
    [
        dict(dtype="float32"),
        dict(dtype="bfloat16", max_shard_bytes=300_000),
        dict(quantize=4, group_size=32),
        dict(quantize=8, group_size=64),
    ],
)
def test_mlx_lm_loads_our_checkpoints_with_the_same_values(tmp_path, tiny, kw, reference):
    mx = reference("mlx.core")
    utils = reference("mlx_lm.utils")
    d = write_random_checkpoint(tmp_path / "m", tiny, **kw)
    model, _ = utils.load_model(d)  # strict: a missing or stray tensor fails here
    params = dict(_flatten(model.parameters()))
    ck = Checkpoint.open(d)
    assert set(params) == set(ck.names())
    for name in ("model.layers.1.mlp.down_proj.weight", "model.norm.weight", "lm_head.weight"):
        theirs = params[name]
        if theirs.dtype == mx.uint32:  # packed codes: bit-identical
            np.testing.assert_array_equal(ck.raw(name), np.array(theirs))
        else:
            np.testing.assert_array_equal(ck.get(name), np.array(theirs.astype(mx.float32)))


def test_mlx_lm_load_accepts_a_full_directory_with_the_real_tokenizer(tmp_path, reference, qwen3_tokenizer_dir):
    mlx_lm = reference("mlx_lm")
    d = write_random_checkpoint(tmp_path / "m", preset("tiny"), tokenizer=qwen3_tokenizer_dir)
    model, tokenizer = mlx_lm.load(str(d))
    assert tokenizer.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert len(model.layers) == 2


def _flatten(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flatten(v, f"{prefix}{k}.")
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _flatten(v, f"{prefix}{i}.")
    else:
        yield prefix[:-1], tree
