"""GGUF input: a Qwen3 GGUF file loads as a model and a tokenizer (``--model file.gguf``), proven by round-trips
through the project's exporter (llama.cpp's layout, the ``gguf`` package's own quantizers) against the safetensors
load of the same weights."""

import json

import numpy as np
import pytest

from fs_generate import GenerateError, generate, load
from fs_generate.cli import main as generate_main
from fs_tokenizer import Tokenizer
from fs_tokenizer.gguf_vocab import gguf_fields
from fs_weights import Checkpoint, preset, write_random_checkpoint
from fs_weights.convert import convert_checkpoint
from fs_weights.gguf_export import write_gguf

gguf = pytest.importorskip("gguf", reason="gguf is a dependency of fs-weights[gguf], which fs-generate requires")
TEXTS = ["Hello world", "def f(x):\n    return x**2  # 你好", "<|im_start|>user\n<think>hi</think><|im_end|>",
         "naïve café \r\n\t 123456 it's", "🙂 emoji"]  # fmt: skip
IDS = [9707, 11, 1879, 0, 42, 1000, 151644, 3838]


@pytest.fixture(scope="module")
def sources(tmp_path_factory, qwen3_tokenizer_dir):
    root = tmp_path_factory.mktemp("gguf")
    f32 = write_random_checkpoint(root / "f32", preset("tiny", tie_word_embeddings=False), dtype="float32",
                                  tokenizer=qwen3_tokenizer_dir)  # fmt: skip
    bf16 = write_random_checkpoint(root / "bf16", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir)
    return {"F32": f32, "BF16": bf16, "F16": convert_checkpoint(f32, root / "f16", dtype="float16"), "Q8_0": bf16,
            "Q4_0": bf16}  # fmt: skip


@pytest.fixture(scope="module")
def exported(sources, tmp_path_factory):
    """ggml type -> its GGUF file, written once per module."""
    root, made = tmp_path_factory.mktemp("exported"), {}

    def get(ggml_type):
        if ggml_type not in made:
            src = sources[ggml_type]
            fields = gguf_fields(Tokenizer.from_pretrained(src), preset("tiny").vocab_size)
            made[ggml_type] = write_gguf(src, root / f"{ggml_type}.gguf", ggml_type=ggml_type, tokenizer_fields=fields)
        return made[ggml_type]

    return get


@pytest.mark.parametrize("ggml_type", ["F32", "F16", "BF16"])
def test_float_files_give_the_safetensors_logits_bit_for_bit(sources, exported, ggml_type):
    src = sources[ggml_type]
    f = exported(ggml_type)
    model, tok = load(str(f))
    ref, rtok = load(str(src))
    assert all(tok.encode(t) == rtok.encode(t) for t in TEXTS)
    assert np.array_equal(np.asarray(model.forward(IDS)), np.asarray(ref.forward(IDS)))
    assert model.config.tie_word_embeddings == ref.config.tie_word_embeddings
    assert model.eos_token_ids == {151645, 151643}  # <|im_end|> and <|endoftext|>, as llama.cpp stops


@pytest.mark.parametrize("ggml_type, bits", [("Q8_0", 8), ("Q4_0", 4)])
def test_quantized_files_hold_exactly_the_gguf_blocks_as_mlx_affine(sources, exported, monkeypatch, ggml_type, bits):
    f = exported(ggml_type)
    ours = Checkpoint.open(f)
    name, qtype = "model.layers.1.mlp.down_proj.weight", gguf.GGMLQuantizationType[ggml_type]
    want = gguf.quants.dequantize(gguf.quants.quantize(Checkpoint.open(sources[ggml_type]).get(name), qtype), qtype)
    assert ours.quant_params(name) == (bits, 32)
    np.testing.assert_array_equal(ours.get(name, dequantize=True), want)
    from fs_model import cpu

    monkeypatch.setattr(cpu.SWITCHES, "int8_activations", False)  # float activations (int8 ones: test_tiles.py)
    model, tok = load(str(f))  # the quantized kernels (bf16 K/V), against float32 copies of the same values
    exact, _ = load(str(f), dtype="float32")
    a, b = np.asarray(model.forward(IDS)), np.asarray(exact.forward(IDS))
    assert np.abs(a - b).max() <= 1e-2 * np.abs(b).max()  # the bf16 tolerance
    greedy = [generate(m, tok, "Hello", max_new_tokens=4).token_ids for m in (model, exact)]
    assert greedy[0] == greedy[1]


def test_q4_k_files_hold_fs_writers_blocks_and_fall_back_to_q5_0_as_llama_quantize_does(tmp_path):
    """``--outtype q4_k``: every matrix whose rows are whole super-blocks of 256 is Q4_K (fs_weights.gguf_q4_k), read
    back as exactly what gguf dequantizes its blocks to; the others are Q5_0, as llama-quantize falls back; the
    model computes the source's logits within 4-bit rounding and on the super-block-record tiles."""
    from fs_weights.gguf_q4_k import q4_k_blocks

    shapes = dict(vocab_size=512, hidden_size=256, intermediate_size=384, head_dim=64, num_attention_heads=4,
                  num_key_value_heads=2, bos_token_id=None, eos_token_id=None)  # fmt: skip
    src = write_random_checkpoint(tmp_path / "src", preset("tiny", **shapes), dtype="float32")
    f = write_gguf(src, tmp_path / "q4_k.gguf", ggml_type="Q4_K")
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(f)).tensors if len(t.shape) == 2}
    assert {v for k, v in types.items() if "ffn_down" in k} == {"Q5_0"}  # 384 columns: not whole super-blocks
    assert {v for k, v in types.items() if "ffn_down" not in k} == {"Q4_K"}
    assert gguf.GGUFReader(str(f)).fields["general.file_type"].parts[-1][0] == 14  # llama.cpp's MOSTLY_Q4_K_S
    name = "model.layers.1.self_attn.q_proj.weight"
    with Checkpoint.open(src) as a, Checkpoint.open(f) as b:
        want = gguf.quants.dequantize(q4_k_blocks(a.get(name)), gguf.GGMLQuantizationType.Q4_K)
        assert b.quant_params(name) == (4, 32) and np.array_equal(b.get(name, dequantize=True), want)
    ids = [3, 141, 59, 265, 358, 97]
    from fs_model import load_model

    ref = np.asarray(load_model(src, dtype="float32").forward(ids))
    err = {t: np.asarray(load_model(g, dtype="float32").forward(ids)) - ref
           for t, g in (("Q4_K", f), ("Q4_0", write_gguf(src, tmp_path / "q4_0.gguf", ggml_type="Q4_0")))}  # fmt: skip
    assert np.linalg.norm(err["Q4_K"]) <= np.linalg.norm(err["Q4_0"])  # at least Q4_0's quality, as in llama.cpp


@pytest.mark.parity
def test_the_mlx_backend_reads_the_same_file(exported, reference):
    reference("mlx.core")
    f = exported("Q4_0")
    a = np.asarray(load(str(f), backend="mlx", dtype="float32")[0].forward(IDS))
    b = np.asarray(load(str(f), dtype="float32")[0].forward(IDS))
    assert np.abs(a - b).max() <= 1e-4 * np.abs(b).max()


def test_fs_generate_takes_a_gguf_model(sources, exported, capsys):
    f = exported("BF16")
    assert generate_main(["--model", str(f), "-p", "Hello", "-m", "5", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    model, tok = load(str(sources["BF16"]))
    assert got["token_ids"] == generate(model, tok, tok.apply_chat_template(
        [{"role": "user", "content": "Hello"}], add_generation_prompt=True, enable_thinking=False, tokenize=True),
        max_new_tokens=5).token_ids  # fmt: skip


def test_bad_gguf_files_are_refused_by_name(exported, tmp_path):
    f = exported("BF16")
    data = f.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) // 2])
    (tmp_path / "text.gguf").write_bytes(b"not a gguf file at all")
    for bad in ("cut.gguf", "text.gguf"):
        with pytest.raises(GenerateError, match="GGUF"):
            load(str(tmp_path / bad))
    w = gguf.GGUFWriter(str(tmp_path / "llama.gguf"), "llama")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(GenerateError, match="general.architecture is 'llama'; supported: 'qwen3', 'qwen3moe'"):
        load(str(tmp_path / "llama.gguf"))
    w = gguf.GGUFWriter(str(tmp_path / "iq4.gguf"), "qwen3")
    w.add_tensor("token_embd.weight", np.zeros((8, 18), np.uint8), raw_dtype=gguf.GGMLQuantizationType.IQ4_NL)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(
        GenerateError,
        match="IQ4_NL; the types that load: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K",
    ):
        load(str(tmp_path / "iq4.gguf"))


def test_yarn_survives_the_trip_through_gguf_and_unknown_scaling_keys_are_refused(tmp_path):
    """config.json's rope_scaling becomes llama.cpp's qwen3.rope.scaling.* keys and comes back the same, so the file
    computes what the directory does past the original context; a scaling key fs does not compute is named."""
    from fs_model import ModelError, load_model

    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    src = write_random_checkpoint(tmp_path / "yarn", preset("tiny", rope_scaling=yarn), dtype="float32")
    out = write_gguf(src, tmp_path / "yarn.gguf", ggml_type="F32")
    a, b = load_model(src, dtype="float32"), load_model(out, dtype="float32")
    assert b.config.rope_scaling == yarn
    ids = list(range(3, 123))  # 120 positions, past the original 32
    assert np.array_equal(np.asarray(a.forward(ids)), np.asarray(b.forward(ids)))
    w = gguf.GGUFWriter(str(tmp_path / "logmul.gguf"), "qwen3")
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_yarn_log_mul(0.1)
    w.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(ModelError, match="'qwen3.rope.scaling.yarn_log_multiplier' is not supported"):
        load_model(tmp_path / "logmul.gguf")


@pytest.mark.parametrize("ggml_type", ["F32", "Q8_0"])
def test_a_lora_adapter_applies_to_a_gguf_file_as_to_its_source(sources, exported, tmp_path, ggml_type):
    """--adapter-path with a .gguf model: a float file gives the source's adapted logits bit for bit; a Q8_0 file's
    adapted weights become bf16 from the blocks' exact values (fs_weights/adapted.py), within its quantization."""
    from fs_weights.random_adapter import write_random_adapter

    src = sources[ggml_type]
    adapter = str(write_random_adapter(src, tmp_path / "adapters", rank=4, num_layers=1))
    got = np.asarray(load(str(exported(ggml_type)), adapter_path=adapter)[0].forward(IDS))
    want = np.asarray(load(str(src), dtype="float32", adapter_path=adapter)[0].forward(IDS))
    plain = np.asarray(load(str(exported(ggml_type)))[0].forward(IDS))
    err = np.abs(got - want).max() / np.abs(want).max()
    assert (err == 0) if ggml_type == "F32" else (err < 0.05)
    assert np.abs(plain - want).max() / np.abs(want).max() > 2 * max(err, 0.01)  # the adapter is what moved them
