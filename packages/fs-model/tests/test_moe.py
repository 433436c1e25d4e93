"""Qwen3-MoE on the numpy backend: the router's ranking, the sparse block against mlx-lm's own ``qwen3_moe`` on
random configs that vary every MoE knob, and the kept-weight kernels (bf16, int8, int4) within their tolerance."""

import numpy as np
import pytest

from fs_model import ModelError, load_model
from fs_model.numpy.moe import route
from fs_weights import write_random_checkpoint
from model_helpers import config, rel_err

IDS = [3, 141, 59, 265, 358, 97, 93, 238, 462, 64, 338, 327]
MOE = dict(model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64)
SHAPES = {  # name -> MoE knobs on fs-model's tiny test config (2 layers)
    "k2-normalized": dict(norm_topk_prob=True),
    "k1-raw-untied": dict(num_experts_per_tok=1, norm_topk_prob=False),
    "every-expert-tied": dict(num_experts=3, num_experts_per_tok=3, tie_word_embeddings=True),
    "dense-layer-0": dict(num_experts=8, mlp_only_layers=[0], norm_topk_prob=True),
    "sparse-step-2": dict(decoder_sparse_step=2, num_layers=3),
}


def moe_config(name):
    knobs = dict(SHAPES[name])
    layers = knobs.pop("num_layers", 2)
    return config(**{**MOE, **knobs}, num_hidden_layers=layers)


@pytest.fixture(scope="module")
def moe_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    return {n: write_random_checkpoint(root / n, moe_config(n), seed=i, dtype="float32") for i, n in enumerate(SHAPES)}


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """bits -> an MLX 4/8-bit (group 64) MoE checkpoint in transformers' names, written once per module."""
    root, made = tmp_path_factory.mktemp("moeq"), {}

    def get(bits):
        if bits not in made:
            made[bits] = write_random_checkpoint(root / f"q{bits}", moe_config("k2-normalized"), dtype="float32",
                                                 quantize=bits, group_size=64)  # fmt: skip
        return made[bits]

    return get


def test_the_router_ranks_largest_first_and_ties_by_the_lower_expert():
    logits = np.array([[0.0, 2.0, 2.0, -1.0], [5.0, 1.0, 1.0, 1.0]], np.float32)
    top, w = route(logits, 2, normalize=False)
    assert top.tolist() == [[1, 2], [0, 1]]  # a tie keeps the lower index first: the summation order is fixed
    p = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(w, np.take_along_axis(p / p.sum(1, keepdims=True), top, 1), rtol=1e-6)
    _, wn = route(logits, 2, normalize=True)
    np.testing.assert_allclose(wn.sum(1), 1.0, rtol=1e-6)


def test_the_sparse_layers_are_the_ones_the_config_names(moe_dirs):
    from fs_model.numpy.moe import SparseMoE

    m = load_model(moe_dirs["sparse-step-2"], dtype="float32")  # step 2: layer 1 only
    assert [isinstance(b.mlp, SparseMoE) for b in m.blocks] == [False, True, False]
    m = load_model(moe_dirs["dense-layer-0"], dtype="float32")
    assert [isinstance(b.mlp, SparseMoE) for b in m.blocks] == [False, True]
    assert len(m.blocks[1].mlp.experts) == 8


def stacked(src, dst):
    """A copy of ``src`` in mlx-lm's layout: each sparse layer's experts stacked as ``mlp.switch_mlp.*`` [E, out, in]
    (mlx-lm's own sanitize stacks transformers' names only when layer 0 is sparse)."""
    import shutil

    from safetensors.numpy import load_file, save_file

    dst.mkdir()
    shutil.copy(src / "config.json", dst / "config.json")
    tensors = {k: v for f in src.glob("*.safetensors") for k, v in load_file(f).items()}
    out = {k: v for k, v in tensors.items() if ".experts." not in k}
    for name in sorted({k.split(".experts.")[0] for k in tensors if ".experts." in k}):
        E = len({k for k in tensors if k.startswith(name + ".experts.") and k.endswith("up_proj.weight")})
        for n in ("gate_proj", "up_proj", "down_proj"):
            for part in ("weight", "scales", "biases"):  # quantized experts stack their scales and biases too
                if f"{name}.experts.0.{n}.{part}" in tensors:
                    each = [tensors[f"{name}.experts.{e}.{n}.{part}"] for e in range(E)]
                    out[f"{name}.switch_mlp.{n}.{part}"] = np.stack(each)
    save_file(out, dst / "model.safetensors")
    return dst


@pytest.mark.parity
@pytest.mark.parametrize("name", list(SHAPES))
def test_logits_equal_mlx_lms_qwen3_moe(moe_dirs, reference, tmp_path, name):
    mx = reference("mlx.core")
    ref, _ = reference("mlx_lm.utils").load_model(stacked(moe_dirs[name], tmp_path / "mlx"))
    want = np.array(ref(mx.array([IDS]))[0].astype(mx.float32))
    got = np.asarray(load_model(moe_dirs[name], dtype="float32").forward(IDS))
    assert rel_err(got, want) <= 1e-5
    assert got.argmax(-1).tolist() == want.argmax(-1).tolist()


@pytest.mark.parity
@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_moe_equals_mlx_lms(quantized, tmp_path, reference, bits):
    """An mlx-community style 4/8-bit MoE (stacked, quantized experts and router) read by both."""
    mx = reference("mlx.core")
    mlx = stacked(quantized(bits), tmp_path / "mlx")
    ref, _ = reference("mlx_lm.utils").load_model(mlx)
    want = np.array(ref(mx.array([IDS]))[0].astype(mx.float32))
    assert rel_err(np.asarray(load_model(mlx, dtype="float32").forward(IDS)), want) <= 1e-4


@pytest.mark.parametrize("bits", [None, 4])
def test_mlx_lms_stacked_layout_loads_as_the_same_model(tmp_path, bits):
    """mlx-community's MoE conversions stack each layer's experts (``mlp.switch_mlp.*`` [E, out, in], quantized
    ones with stacked scales and biases): read as per-expert views, the same weights give the same logits."""
    from safetensors import safe_open

    stored = dict(dtype="float32") if bits is None else dict(dtype="float32", quantize=bits, group_size=64)
    src = write_random_checkpoint(tmp_path / "hf", moe_config("dense-layer-0"), **stored)
    mlx = stacked(src, tmp_path / "mlx")
    with safe_open(str(mlx / "model.safetensors"), "np") as f:
        names = list(f.keys())
    assert not any(".experts." in k for k in names) and any(".switch_mlp." in k for k in names)
    for dtype in ("float32", "native"):
        a, b = load_model(src, dtype=dtype), load_model(mlx, dtype=dtype)
        assert np.array_equal(np.asarray(a.forward(IDS)), np.asarray(b.forward(IDS)))


@pytest.mark.kernels
@pytest.mark.parametrize("bits", [None, 8, 4])
def test_kept_formats_run_the_experts_on_the_kernels(tmp_path, monkeypatch, bits):
    """A bf16 / MLX 8-bit / 4-bit MoE checkpoint on the kernels against float32 copies of the same values: the
    router picks the same experts and only bf16 K/V rounding is left."""
    from fs_model import cpu
    from fs_model.cpu.affine import AffineLinear
    from fs_model.cpu.bf16 import Bf16Linear

    if not cpu.HAVE_NUMBA:
        pytest.fail("the kernels session installs numba")
    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", False)  # float activations (int8 ones: test_tiles.py)
    stored = dict(dtype="bfloat16") if bits is None else dict(dtype="float32", quantize=bits, group_size=64)
    d = write_random_checkpoint(tmp_path / "m", moe_config("k2-normalized"), **stored)
    kept = load_model(d)
    expert = kept.blocks[0].mlp.experts[3].down
    assert isinstance(expert, Bf16Linear if bits is None else AffineLinear)
    got = np.asarray(kept.forward(IDS))
    want = np.asarray(load_model(d, dtype="float32").forward(IDS))
    assert rel_err(got, want) <= 1e-2  # bf16's tolerance


def test_checkpoints_missing_an_expert_are_refused_by_name(moe_dirs, tmp_path):
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    d = tmp_path / "cut"
    shutil.copytree(moe_dirs["k2-normalized"], d)
    f = next(d.glob("*.safetensors"))
    tensors = {k: v for k, v in load_file(f).items() if "experts.3.up_proj" not in k}
    save_file(tensors, f)
    if (d / "model.safetensors.index.json").exists():
        idx = json.loads((d / "model.safetensors.index.json").read_text())
        idx["weight_map"] = {k: v for k, v in idx["weight_map"].items() if k in tensors}
        (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(ModelError, match=r"missing model\.layers\.0\.mlp\.experts\.3\.up_proj\.weight"):
        load_model(d, dtype="float32")


@pytest.mark.parity
@pytest.mark.parametrize("name", list(SHAPES))
def test_the_mlx_backend_runs_the_same_moe(moe_dirs, reference, name):
    """Experts stacked and multiplied by mx.gather_mm: the numpy reference's logits to float32 rounding."""
    reference("mlx.core")
    got = np.asarray(load_model(moe_dirs[name], backend="mlx", dtype="float32").forward(IDS))
    want = np.asarray(load_model(moe_dirs[name], dtype="float32").forward(IDS))
    assert rel_err(got, want) <= 1e-5


@pytest.mark.parity
@pytest.mark.parametrize("bits", [4, 8])
def test_the_mlx_backend_keeps_quantized_experts_quantized(quantized, reference, bits):
    mx = reference("mlx.core")
    src = quantized(bits)
    m = load_model(src, backend="mlx", dtype="float32")
    experts = m.blocks[0].w["moe"].down
    assert experts.w.dtype == mx.uint32 and experts.w.shape == (4, 64, 64 * bits // 32)  # [E, H, M·bits/32]
    want = np.asarray(load_model(src, dtype="float32").forward(IDS))
    assert rel_err(np.asarray(m.forward(IDS)), want) <= 1e-4
