"""Qwen3-MoE as llama.cpp's ``qwen3moe`` GGUF: the router as ``ffn_gate_inp``, each projection's experts stacked
``[E, out, in]`` as ``ffn_{gate,up,down}_exps`` (quantized per expert row like any matrix), the ``expert_*`` keys.
fs writes it (``fs-convert-gguf``) and reads it back: F32 bit for bit, quantized types exactly gguf's own
dequantization of each expert's blocks, on both backends. (llama.cpp itself runs these files:
benchmarks/gguf_vs_llama.py.)"""

import numpy as np
import pytest

from fs_model import load_model
from fs_weights import Checkpoint, preset, write_random_checkpoint
from fs_weights.gguf_export import write_gguf

gguf = pytest.importorskip("gguf", reason="gguf is a dependency of fs-weights[gguf], which fs-generate requires")
MOE = dict(model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
           norm_topk_prob=True, vocab_size=512, bos_token_id=None, eos_token_id=None)  # fmt: skip
IDS = [3, 141, 59, 265, 358, 97]


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("moe") / "src", preset("tiny", **MOE), dtype="float32")


def test_an_f32_qwen3moe_file_gives_the_safetensors_logits_bit_for_bit(src, tmp_path):
    f = write_gguf(src, tmp_path / "m.gguf", ggml_type="F32")
    reader = gguf.GGUFReader(str(f))
    assert reader.fields["general.architecture"].contents() == "qwen3moe"
    assert reader.fields["qwen3moe.expert_count"].contents() == 4
    assert reader.fields["qwen3moe.expert_used_count"].contents() == 2
    exps = {t.name: tuple(t.shape) for t in reader.tensors if "exps" in t.name}
    assert exps["blk.0.ffn_down_exps.weight"] == (64, 64, 4)  # llama.cpp's order: in, out, experts
    model = load_model(f, dtype="float32")
    assert model.config.model_type == "qwen3_moe" and model.config.norm_topk_prob
    want = np.asarray(load_model(src, dtype="float32").forward(IDS))
    assert np.array_equal(np.asarray(model.forward(IDS)), want)


@pytest.mark.parametrize("ggml_type", ["Q8_0", "Q4_0"])
def test_quantized_experts_are_ggufs_dequantization_of_their_own_blocks(src, tmp_path, ggml_type):
    f = write_gguf(src, tmp_path / "m.gguf", ggml_type=ggml_type)
    qtype = gguf.GGMLQuantizationType[ggml_type]
    with Checkpoint.open(src) as ref, Checkpoint.open(f) as ours:
        for e in (0, 3):
            name = f"model.layers.1.mlp.experts.{e}.up_proj.weight"
            assert ours.is_quantized(name) and ours.info(name).shape == (64, 64 * ours.quant_params(name)[0] // 32)
            want = gguf.quants.dequantize(gguf.quants.quantize(ref.get(name), qtype), qtype)
            np.testing.assert_array_equal(ours.get(name, dequantize=True), want)


@pytest.mark.parity
def test_the_mlx_backend_reads_the_same_qwen3moe_file(src, tmp_path, reference):
    reference("mlx.core")
    f = write_gguf(src, tmp_path / "m.gguf", ggml_type="Q8_0")
    got = np.asarray(load_model(f, backend="mlx", dtype="float32").forward(IDS))
    want = np.asarray(load_model(f, dtype="float32").forward(IDS))
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
