"""fs_weights against mlx / mlx-lm: quantization layout, dtype conversion, and checkpoints mlx-lm accepts."""

import json
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


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_quantize_equals_mx_quantize_bit_for_bit(bits, group, dtype, reference):
    """Our quantizer is mlx's: codes, scales and biases identical (bf16: computed from the bf16 values in float32,
    scales and biases rounded to bf16, as mlx-lm's convert stores them)."""
    mx = reference("mlx.core")
    from fs_weights.dtypes import from_float32, to_float32

    w = np.random.default_rng(bits * group).standard_normal((96, 512)).astype(np.float32)
    w[:, :group] = 0.0  # an all-zero group (q0 == 0 for both edges)
    wm = mx.array(w).astype(getattr(mx, dtype))
    packed, scales, biases = (np.array(a.astype(mx.float32)) if a.dtype != mx.uint32 else np.array(a)
                              for a in mx.quantize(wm, group_size=group, bits=bits))  # fmt: skip
    ours = quantize(np.array(wm.astype(mx.float32)), bits=bits, group_size=group)
    rounded = (lambda a: to_float32(from_float32(a, "BF16"), "BF16")) if dtype == "bfloat16" else (lambda a: a)
    np.testing.assert_array_equal(ours[0], packed)
    np.testing.assert_array_equal(rounded(ours[1]), scales)
    np.testing.assert_array_equal(rounded(ours[2]), biases)


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


@pytest.mark.parametrize(
    "kw", [{"quantize": 4, "group_size": 64}, {"quantize": 8, "group_size": 32}, {"dtype": "float16"}]
)
def test_convert_writes_the_tensors_mlx_lm_convert_writes(tmp_path, qwen3_tokenizer_dir, reference, kw):
    """Same source, both converters: every tensor equal byte for byte, and the same quantization entry."""
    mlx_lm = reference("mlx_lm")
    from fs_weights.convert import convert_checkpoint

    src = write_random_checkpoint(tmp_path / "src", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir)
    ours = convert_checkpoint(src, tmp_path / "ours", **kw)
    q = {"quantize": True, "q_bits": kw["quantize"], "q_group_size": kw["group_size"]} if "quantize" in kw else {}
    mlx_lm.convert(str(src), str(tmp_path / "theirs"), dtype=kw.get("dtype"), **q)
    a, b = Checkpoint.open(ours), Checkpoint.open(tmp_path / "theirs")
    assert sorted(a.names()) == sorted(b.names())
    for n in a.names():
        assert a.info(n).dtype == b.info(n).dtype and np.array_equal(a.raw(n), b.raw(n)), n
    cfg = [json.loads((d / "config.json").read_text()) for d in (ours, tmp_path / "theirs")]
    assert cfg[0].get("quantization") == cfg[1].get("quantization")
