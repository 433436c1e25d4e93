"""fs-weights convert: dtype casts and mlx-affine quantization into a new model directory, atomically."""

import json

import numpy as np
import pytest

from fs_weights import Checkpoint, WeightsError, load_config, preset, quantize, write_random_checkpoint
from fs_weights.cli import main
from fs_weights.convert import convert_checkpoint
from fs_weights.dtypes import from_float32, to_float32


@pytest.fixture(scope="module")
def src(tmp_path_factory, qwen3_tokenizer_dir):
    return write_random_checkpoint(tmp_path_factory.mktemp("src") / "bf16", preset("tiny"), dtype="bfloat16",
                                   tokenizer=qwen3_tokenizer_dir)  # fmt: skip


def test_quantized_output_holds_quantize_of_each_source_weight(src, tmp_path):
    out = convert_checkpoint(src, tmp_path / "q4", quantize=4, group_size=32)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization"] == {"group_size": 32, "bits": 4, "mode": "affine"} and cfg["torch_dtype"] == "bfloat16"
    a, b = Checkpoint.open(src), Checkpoint.open(out)
    name = "model.layers.1.mlp.down_proj.weight"
    packed, scales, biases = quantize(a.get(name), bits=4, group_size=32)
    np.testing.assert_array_equal(b.raw(name), packed)
    np.testing.assert_array_equal(b.raw(name.replace("weight", "scales")), from_float32(scales, "BF16"))
    np.testing.assert_array_equal(b.raw(name.replace("weight", "biases")), from_float32(biases, "BF16"))
    assert b.raw("model.norm.weight").tobytes() == a.raw("model.norm.weight").tobytes()  # norms stay float
    assert {p.name for p in out.iterdir()} >= {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}


def test_dtype_cast_and_dequantizing_back(src, tmp_path):
    f16 = convert_checkpoint(src, tmp_path / "f16", dtype="float16")
    a, b = Checkpoint.open(src), Checkpoint.open(f16)
    assert b.info("model.embed_tokens.weight").dtype == "F16"
    e = a.get("model.embed_tokens.weight")
    np.testing.assert_array_equal(b.get("model.embed_tokens.weight"), to_float32(from_float32(e, "F16"), "F16"))
    q8 = convert_checkpoint(src, tmp_path / "q8", quantize=8)
    back = convert_checkpoint(q8, tmp_path / "back", dtype="float32")
    w = Checkpoint.open(back).get("model.layers.0.self_attn.q_proj.weight")
    np.testing.assert_array_equal(w, Checkpoint.open(q8).get("model.layers.0.self_attn.q_proj.weight", dequantize=True))
    assert "quantization" not in json.loads((back / "config.json").read_text())


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"quantize": 4}, "already quantized"),  # from the q8 source below
        ({"dtype": "int8"}, "not one of"),
    ],
)
def test_refusals(src, tmp_path, kw, words):
    q8 = convert_checkpoint(src, tmp_path / "q8", quantize=8)
    with pytest.raises(WeightsError, match=words):
        convert_checkpoint(q8 if "quantize" in kw else src, tmp_path / "out", **kw)
    assert not (tmp_path / "out").exists()


def test_an_existing_output_is_kept_unless_overwrite(src, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    with pytest.raises(WeightsError, match="not empty"):
        convert_checkpoint(src, tmp_path / "out")
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep"
    with pytest.raises(WeightsError, match="was not written by fs-weights"):  # a user's directory, overwrite or not
        convert_checkpoint(src, tmp_path / "out", overwrite=True)
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep"
    convert_checkpoint(src, tmp_path / "fs", dtype="float16")
    with pytest.raises(WeightsError, match="not empty"):
        convert_checkpoint(src, tmp_path / "fs")
    convert_checkpoint(src, tmp_path / "fs", overwrite=True)  # what fs wrote, it may replace
    assert load_config(tmp_path / "fs").torch_dtype != "float16"


def test_an_output_that_is_contains_or_lies_inside_the_source_is_refused(tmp_path, tiny):
    parent = tmp_path / "parent"
    model = write_random_checkpoint(parent / "model", tiny)
    (parent / "sibling.txt").write_text("keep")
    for out, how in ((parent, "contains"), (model, "is"), (model / "sub", "lies inside")):
        with pytest.raises(WeightsError, match=f"the output {how} the source"):
            convert_checkpoint(model, out, overwrite=True)
    assert (parent / "sibling.txt").read_text() == "keep" and (model / "config.json").is_file()


def test_an_interrupted_conversion_leaves_nothing(src, tmp_path):
    def stop(done, total):
        if done > total // 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert_checkpoint(src, tmp_path / "out", quantize=4, progress=stop)
    assert list(tmp_path.iterdir()) == []


def test_cli_with_mlx_lm_flag_names(src, tmp_path, capsys):
    assert (
        main(["convert", "--hf-path", str(src), "--mlx-path", str(tmp_path / "m"), "-q", "--q-group-size", "32"]) == 0
    )
    assert "4-bit, group 32" in capsys.readouterr().out
    assert json.loads((tmp_path / "m" / "config.json").read_text())["quantization"]["group_size"] == 32
    assert main(["convert", str(tmp_path / "nope"), str(tmp_path / "x")]) == 2
    assert "no such model directory" in capsys.readouterr().err


def test_mlx_lm_convert_spellings_model_bare_quantize_and_dequantize(src, tmp_path, capsys):
    """mlx_lm.convert's --model (its newer name for --hf-path), its bare --quantize (a switch: --q-bits), and
    -d/--dequantize (a quantized source back to floats; refused together with quantizing, as mlx-lm refuses)."""
    q = tmp_path / "q"
    assert main(["convert", "--model", str(src), "--mlx-path", str(q), "--quantize", "--q-bits", "8"]) == 0
    assert json.loads((q / "config.json").read_text())["quantization"]["bits"] == 8
    assert main(["convert", "--model", str(q), "--mlx-path", str(tmp_path / "f"), "-d"]) == 0
    cfg = json.loads((tmp_path / "f" / "config.json").read_text())
    assert "quantization" not in cfg and "quantization_config" not in cfg
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["convert", str(src), str(tmp_path / "x"), "-d", "-q"])
    assert e.value.code == 2 and "choose --dequantize or --quantize/-q, not both" in capsys.readouterr().err


def test_quantizing_a_moe_keeps_the_router_at_8_bits_as_mlx_lm_does(tmp_path):
    """mlx-lm's qwen3_moe quant_predicate: ``mlp.gate`` (the router, whose scores pick the experts) at 8 bits,
    group 64, written as MLX's per-module entry; the experts at the requested bits."""
    import json

    from fs_weights import Checkpoint, preset, write_random_checkpoint
    from fs_weights.convert import convert_checkpoint

    moe = preset("tiny", model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                 vocab_size=512, bos_token_id=None, eos_token_id=None)  # fmt: skip
    src = write_random_checkpoint(tmp_path / "src", moe, dtype="bfloat16")
    out = convert_checkpoint(src, tmp_path / "q4", quantize=4, group_size=32)
    q = json.loads((out / "config.json").read_text())["quantization"]
    assert q["model.layers.1.mlp.gate"] == {"group_size": 64, "bits": 8} and q["bits"] == 4
    with Checkpoint.open(out) as ck:
        assert ck.quant_params("model.layers.1.mlp.gate.weight") == (8, 64)
        assert ck.quant_params("model.layers.1.mlp.experts.2.down_proj.weight") == (4, 32)
        assert ck.info("model.layers.1.mlp.gate.weight").shape == (4, 64 * 8 // 32)
