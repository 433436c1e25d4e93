"""LoRA adapters: both file layouts read into one update, applied as the model loads, and fused into a directory."""

import json

import numpy as np
import pytest

from fs_weights import Checkpoint, WeightsError, dequantize, save_safetensors, write_random_checkpoint
from fs_weights.adapted import AdaptedCheckpoint
from fs_weights.adapter import load_adapter
from fs_weights.cli import main
from fs_weights.dtypes import to_float32
from fs_weights.fuse import fuse_adapter
from fs_weights.random_adapter import write_random_adapter

Q = "model.layers.1.self_attn.q_proj.weight"  # adapted (the last layer)
K0 = "model.layers.0.self_attn.k_proj.weight"  # not adapted (num_layers=1)


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    from fs_weights import preset

    d = tmp_path_factory.mktemp("lora")
    cfg = preset("tiny", vocab_size=512, tie_word_embeddings=False)
    return {
        "bf16": write_random_checkpoint(d / "bf16", cfg, dtype="bfloat16", seed=3),
        "f32": write_random_checkpoint(d / "f32", cfg, dtype="float32", seed=3),
        "q4": write_random_checkpoint(d / "q4", cfg, dtype="bfloat16", quantize=4, group_size=32, seed=3),
    }


def _adapted(base, adapter_dir):
    return AdaptedCheckpoint(Checkpoint.open(base), load_adapter(adapter_dir))


def test_the_update_is_w_plus_scale_b_a_and_both_layouts_mean_it(bases, tmp_path):
    mlx = write_random_adapter(bases["f32"], tmp_path / "mlx", rank=4, scale=8.0, num_layers=1)
    peft = write_random_adapter(bases["f32"], tmp_path / "peft", rank=4, scale=8.0, num_layers=1, layout="peft")
    lora = Checkpoint.open(mlx / "adapters.safetensors")
    A, B = (lora.get(f"model.layers.1.self_attn.q_proj.{n}").astype(np.float64) for n in ("lora_a", "lora_b"))
    W = Checkpoint.open(bases["f32"]).get(Q).astype(np.float64)
    want = W + 8.0 * (A @ B).T  # mlx-lm's y = x Wᵀ + scale (x A) B, as one weight
    got = _adapted(bases["f32"], mlx).get(Q)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()
    assert np.abs(want - W).max() > 1e-2 * np.abs(W).max()  # the update is large enough to be seen
    assert np.array_equal(_adapted(bases["f32"], peft).get(Q), got)  # PEFT's lora_alpha / r is mlx-lm's scale


def test_float_weights_keep_their_dtype_and_quantized_ones_become_bf16(bases, tmp_path):
    a = write_random_adapter(bases["bf16"], tmp_path / "a", rank=2, num_layers=1)
    base, ck = Checkpoint.open(bases["bf16"]), _adapted(bases["bf16"], a)
    assert ck.info(Q).dtype == "BF16" and ck.raw(Q).dtype == np.uint16 and not ck.is_view(Q, ck.raw(Q))
    assert ck.raw(K0).tobytes() == base.raw(K0).tobytes() and ck.is_view(K0, ck.raw(K0))  # untouched: the mmap
    q = _adapted(bases["q4"], a)
    assert not q.is_quantized(Q) and q.info(Q).dtype == "BF16" and q.info(Q).shape == (128, 64)
    assert Q.replace("weight", "scales") not in q.names() and q.is_quantized(K0)
    qb = Checkpoint.open(bases["q4"])
    want = load_adapter(a).updates[Q].apply(qb.get(Q, dequantize=True))  # the codes' exact values, updated
    assert np.abs(q.get(Q) - want).max() <= 2**-8 * np.abs(want).max()  # one bf16 rounding


def test_the_digest_names_the_adapter(bases, tmp_path):
    one = write_random_adapter(bases["bf16"], tmp_path / "1", seed=1)
    two = write_random_adapter(bases["bf16"], tmp_path / "2", seed=2)
    digests = {Checkpoint.open(bases["bf16"]).digest(), _adapted(bases["bf16"], one).digest()}
    digests.add(_adapted(bases["bf16"], two).digest())
    assert len(digests) == 3  # a prompt cache or agent checkpoint made under one is refused under another


def test_dora_rescales_each_row_to_its_magnitude(bases, tmp_path):
    a = write_random_adapter(bases["f32"], tmp_path / "dora", rank=4, num_layers=1, dora=True)
    m = Checkpoint.open(a / "adapters.safetensors").get("model.layers.1.self_attn.q_proj.m")
    got = _adapted(bases["f32"], a).get(Q)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), m, rtol=1e-5)


@pytest.mark.parametrize("kind", ["bf16", "f32"])
def test_fuse_writes_the_base_layout_with_the_adapted_weights(bases, tmp_path, kind):
    a = write_random_adapter(bases[kind], tmp_path / "a", num_layers=1)
    out = fuse_adapter(bases[kind], a, tmp_path / "fused")
    base, fused, live = Checkpoint.open(bases[kind]), Checkpoint.open(out), _adapted(bases[kind], a)
    assert fused.names() == base.names() and json.loads((out / "config.json").read_text()) == json.loads(
        (bases[kind] / "config.json").read_text()
    )
    for n in base.names():  # fuse then load == the adapter applied at load, bit for bit
        assert fused.info(n).dtype == base.info(n).dtype and fused.raw(n).tobytes() == live.raw(n).tobytes(), n


def test_fuse_requantizes_a_quantized_base_as_mlx_lm_fuse_does(bases, tmp_path):
    a = write_random_adapter(bases["q4"], tmp_path / "a", num_layers=1)
    out = fuse_adapter(bases["q4"], a, tmp_path / "fused")
    base, fused = Checkpoint.open(bases["q4"]), Checkpoint.open(out)
    assert fused.names() == base.names() and fused.is_quantized(Q) and fused.quant_params(Q) == (4, 32)
    assert fused.raw(K0).tobytes() == base.raw(K0).tobytes()  # codes the adapter does not touch are copied
    from fs_weights import quantize
    from fs_weights.dtypes import from_float32

    exact = _adapted(bases["q4"], a).fused(Q)
    packed, scales, biases = quantize(to_float32(from_float32(exact, "BF16"), "BF16"), bits=4, group_size=32)
    assert np.array_equal(fused.raw(Q), packed)
    assert np.array_equal(fused.raw(Q.replace("weight", "scales")), from_float32(scales, "BF16"))
    assert np.array_equal(fused.raw(Q.replace("weight", "biases")), from_float32(biases, "BF16"))
    deq = dequantize(fused.raw(Q), fused.get(Q.replace("weight", "scales")), fused.get(Q.replace("weight", "biases")),
                     bits=4, group_size=32)  # fmt: skip
    assert not np.array_equal(deq, base.get(Q, dequantize=True))
    dense = fuse_adapter(bases["q4"], a, tmp_path / "dense", dequantize=True)
    assert not Checkpoint.open(dense).is_quantized(Q) and Checkpoint.open(dense).info(Q).dtype == "BF16"


def test_fuse_command_takes_mlx_lm_fuses_flags(bases, tmp_path, capsys):
    a = write_random_adapter(bases["bf16"], tmp_path / "a", num_layers=1)
    args = ["fuse", "--model", str(bases["bf16"]), "--adapter-path", str(a), "--save-path", str(tmp_path / "out")]
    assert main([*args, "--quiet"]) == 0 and (tmp_path / "out" / "model.safetensors").is_file()
    with pytest.raises(SystemExit):
        main([*args, "--export-gguf"])
    assert "fs-convert-gguf" in capsys.readouterr().err


def _write(d, cfg, tensors):
    d.mkdir(exist_ok=True)
    (d / "adapter_config.json").write_text(json.dumps(cfg))
    save_safetensors(d / "adapters.safetensors", tensors)
    return d


LORA = {"fine_tune_type": "lora", "num_layers": 1, "lora_parameters": {"rank": 2, "scale": 1.0}}
P = "model.layers.1.self_attn.q_proj"
A2, B2 = np.zeros((64, 2), np.float32), np.zeros((2, 256), np.float32)


@pytest.mark.parametrize(
    "cfg,tensors,message",
    [
        (LORA, {P + ".lora_a": A2}, f"{P!r} has lora_a without its pair"),
        (LORA, {P + ".lora_a": A2, P + ".lora_b": B2, P + ".bias": B2[0]}, f"tensor '{P}.bias' is not a lora_a"),
        (LORA, {P + ".lora_a": A2, P + ".lora_b": B2[:1]}, "do not form a rank-r update"),
        (LORA, {P + ".lora_a": np.zeros((32, 2), np.float32), P + ".lora_b": B2}, f"the update for '{P}.weight' is"),
        (LORA, {"model.layers.9.mlp.up_proj.lora_a": A2, "model.layers.9.mlp.up_proj.lora_b": B2}, "another model?"),
        (LORA, {P + ".lora_a": A2, P + ".lora_b": np.full((2, 128), np.nan, np.float32)}, "NaN"),
        (LORA, {P + ".lora_a": A2.astype(np.int32), P + ".lora_b": B2}, "adapter tensors are floats"),
        (LORA | {"fine_tune_type": "full"}, {P + ".weight": A2}, f"the update for '{P}.weight' is [64, 2]"),
        (LORA | {"fine_tune_type": "full"}, {"model.layers.1.self_attn.q_proj.lora_a": A2}, "another model?"),
        (LORA | {"lora_parameters": {"rank": 2}}, {}, "a numeric 'scale'"),
        (LORA, {"model.embed_tokens.lora_a": A2, "model.embed_tokens.lora_b": B2}, "on the embedding is not supported"),
        (LORA, {P + ".lora_a": A2, P + ".lora_b": B2, P + ".m": B2[0]}, "DoRA's magnitude"),
    ],
)
def test_a_bad_adapter_is_named_before_anything_is_applied(bases, tmp_path, cfg, tensors, message):
    d = _write(tmp_path / "bad", cfg, tensors or {P + ".lora_a": A2, P + ".lora_b": B2})
    with pytest.raises(WeightsError) as e:
        _adapted(bases["bf16"], d)
    assert message in str(e.value) and str(d) in str(e.value)


def test_a_missing_adapter_is_one_line(bases, tmp_path, capsys):
    args = ["fuse", "--model", str(bases["bf16"]), "--adapter-path", str(tmp_path / "none")]
    assert main([*args, "--save-path", str(tmp_path / "o")]) != 0
    assert capsys.readouterr().err.strip().endswith(f"{tmp_path / 'none'}: no such adapter directory (it holds "
                                                    "adapter_config.json and adapters.safetensors or "
                                                    "adapter_model.safetensors)")  # fmt: skip
    assert not (tmp_path / "o").exists()
