"""LoRA adapters against mlx-lm: the adapter is made by mlx-lm's own code (its LoRA layers on the model, the trainable
parameters saved as mlx_lm.lora saves them), and mlx-lm's model with those layers - run unfused - is the reference
for fs's ``load_model(..., adapter_path=)`` on both backends."""

import json

import numpy as np
import pytest

from fs_model import load_model
from fs_weights import write_random_checkpoint
from model_helpers import config, rel_err

pytestmark = pytest.mark.parity
IDS = [3, 141, 59, 265, 358, 97, 93, 238, 462, 64, 338, 327]
MOE = dict(model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, norm_topk_prob=True)


def mlx_lm_adapter(reference, model_dir, out, *, num_layers=1, dora=False, rank=4, scale=10.0):
    """Write an adapter as mlx_lm.lora does and return mlx-lm's model carrying it (the reference forward)."""
    mx = reference("mlx.core")
    tree_flatten = reference("mlx.utils").tree_flatten
    tuner = reference("mlx_lm.tuner.utils")
    model, _ = reference("mlx_lm.utils").load_model(model_dir)
    model.freeze()
    params = {"rank": rank, "scale": scale, "dropout": 0.0}
    tuner.linear_to_lora_layers(model, num_layers, params, use_dora=dora)
    mx.random.seed(7)
    for _, m in model.named_modules():  # a trained adapter: lora_b away from its zero initialization
        if hasattr(m, "lora_b"):
            m.lora_b = (mx.random.normal(m.lora_b.shape) * (0.1 / scale)).astype(m.lora_b.dtype)
    out.mkdir()
    mx.save_safetensors(str(out / "adapters.safetensors"), dict(tree_flatten(model.trainable_parameters())))
    cfg = {"fine_tune_type": "dora" if dora else "lora", "num_layers": num_layers, "lora_parameters": params}
    (out / "adapter_config.json").write_text(json.dumps(cfg))
    return model


def logits(reference, model):
    mx = reference("mlx.core")
    return np.array(model(mx.array([IDS]))[0].astype(mx.float32))


@pytest.mark.parametrize("backend", ["numpy", "mlx"])
@pytest.mark.parametrize("kind", ["lora", "dora", "lora-all-layers", "moe"])
def test_float32_logits_equal_mlx_lms_unfused_adapter(tmp_path, reference, kind, backend):
    knobs = MOE if kind == "moe" else {}
    d = write_random_checkpoint(tmp_path / "m", config(**knobs), dtype="float32", seed=5)
    ref = mlx_lm_adapter(reference, d, tmp_path / "a", dora=kind == "dora", num_layers=-1 if "all" in kind else 1)
    want = logits(reference, ref)
    got = np.asarray(load_model(d, backend=backend, dtype="float32", adapter_path=tmp_path / "a").forward(IDS))
    plain = np.asarray(load_model(d, backend=backend, dtype="float32").forward(IDS))
    assert rel_err(got, want) <= 1e-5  # fused W + scale·B@A in float32 == mlx-lm's y + scale·(x A) B
    assert rel_err(plain, want) > 1e-2  # and the adapter is not a no-op this test could miss


@pytest.mark.parametrize("backend", ["numpy", "mlx"])
@pytest.mark.parametrize("base", ["bf16", "int4", "int8"])
def test_kept_formats_match_mlx_lm_within_their_tolerance(tmp_path, reference, base, backend):
    """bf16: the adapted weights stay bf16 (one rounding); int4/int8: the adapted matrices are kept as bf16 beside
    the others' codes, where mlx-lm runs its quantized layer plus the unfused update."""
    bits = {"int4": 4, "int8": 8}.get(base)
    dtype = "bfloat16" if base == "bf16" else "float32"
    d = write_random_checkpoint(tmp_path / "m", config(), dtype=dtype, quantize=bits, group_size=32, seed=5)
    ref = mlx_lm_adapter(reference, d, tmp_path / "a", num_layers=-1)
    ref.set_dtype(reference("mlx.core").float32)  # the reference in float32: what is measured is fs's rounding
    want = logits(reference, ref)
    m = load_model(d, backend=backend, adapter_path=tmp_path / "a")
    assert rel_err(m.to_numpy(m.forward(IDS)), want) <= 2e-2


def test_fs_fuse_matches_mlx_lm_fuse(tmp_path, reference):
    """``fs-weights fuse`` writes what mlx_lm.fuse writes, up to mlx_lm.fuse's extra rounding of the update to bf16
    before the add: at most one bf16 unit in the last place of the largest of W, the update and the sum apart."""
    mx = reference("mlx.core")
    from fs_weights import Checkpoint
    from fs_weights.dtypes import to_float32
    from fs_weights.fuse import fuse_adapter

    d = write_random_checkpoint(tmp_path / "m", config(), dtype="bfloat16", seed=5)
    ref = mlx_lm_adapter(reference, d, tmp_path / "a", num_layers=-1)
    fused = {n: m.fuse() for n, m in ref.named_modules() if hasattr(m, "fuse")}
    base, out = Checkpoint.open(d), Checkpoint.open(fuse_adapter(d, tmp_path / "a", tmp_path / "fused"))
    assert len(fused) == 14  # 7 matrices x 2 layers
    for name, layer in fused.items():
        want = np.array(layer.weight.astype(mx.float32))
        got, w = to_float32(out.raw(name + ".weight"), "BF16"), base.get(name + ".weight")
        operand = np.maximum(np.maximum(np.abs(w), np.abs(want - w)), np.abs(want))
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(operand, 1e-30))) - 7)
        assert (np.abs(got - want) <= ulp).all() and (got == want).mean() > 0.8, name


@pytest.mark.parametrize("backend", ["numpy", "mlx"])
def test_a_full_fine_tune_replaces_the_trained_layers_tensors(tmp_path, reference, backend):
    """mlx_lm.lora --fine-tune-type full: the last layer unfrozen, its tensors (matrices and norms) saved as trained;
    fs loads them in place of the base's and equals mlx-lm's model holding them."""
    mx = reference("mlx.core")
    tree_flatten = reference("mlx.utils").tree_flatten
    d = write_random_checkpoint(tmp_path / "m", config(), dtype="float32", seed=5)
    ref, _ = reference("mlx_lm.utils").load_model(d)
    ref.freeze()
    ref.model.layers[-1].unfreeze()
    mx.random.seed(3)
    trained = {k: v + 0.05 * mx.random.normal(v.shape) for k, v in tree_flatten(ref.trainable_parameters())}
    ref.load_weights(list(trained.items()), strict=False)
    (tmp_path / "a").mkdir()
    mx.save_safetensors(str(tmp_path / "a" / "adapters.safetensors"), trained)
    (tmp_path / "a" / "adapter_config.json").write_text(json.dumps({"fine_tune_type": "full", "num_layers": 1}))
    assert any(k.endswith("input_layernorm.weight") for k in trained)  # norms are trained too
    got = np.asarray(load_model(d, backend=backend, dtype="float32", adapter_path=tmp_path / "a").forward(IDS))
    assert rel_err(got, logits(reference, ref)) <= 1e-5
