import json
import math

import numpy as np
import pytest

from fs_weights import (
    Checkpoint,
    CrossCheckError,
    SafetensorsError,
    WeightsError,
    cross_check,
    expected_tensors,
    load_config,
    preset,
    save_safetensors,
    write_random_checkpoint,
)
from fs_weights.model_dir import MARKER
from fs_weights.random_checkpoint import random_tensor


def test_parameter_count_of_qwen3_0_6b():
    c = preset("qwen3-0.6b")
    shapes = expected_tensors(c)
    assert len(shapes) == 1 + 28 * 11 + 1  # embed, 11 per block, final norm; tied: no lm_head
    assert sum(math.prod(s) for s in shapes.values()) == 596_049_920
    assert "lm_head.weight" in expected_tensors(c.replace(tie_word_embeddings=False))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_random_checkpoint_roundtrip(tmp_path, tiny, dtype):
    d = write_random_checkpoint(tmp_path / "m", tiny, seed=3, dtype=dtype)
    assert {p.name for p in d.iterdir()} == {"config.json", "generation_config.json", "model.safetensors", MARKER}
    assert load_config(d) == tiny.replace(torch_dtype=dtype)
    ck = Checkpoint.open(d)
    report = cross_check(load_config(d), ck, strict=True)
    assert report.ok and report.parameters == sum(math.prod(s) for s in expected_tensors(tiny).values())
    assert report.dtypes == {dict(float32="F32", float16="F16", bfloat16="BF16")[dtype]: len(ck)}
    name = "model.layers.1.mlp.down_proj.weight"
    exact = random_tensor(name, (64, 128), tiny, 3)
    tol = {"float32": 0, "float16": 1e-3, "bfloat16": 2**-8}[dtype]
    np.testing.assert_allclose(ck.get(name), exact, rtol=tol, atol=1e-6 if tol else 0)
    assert ck.get(name).dtype == np.float32
    assert (
        ck.get(name, dtype=None).dtype == {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}[dtype]
    )


def test_deterministic_per_seed_and_independent_of_sharding(tmp_path, tiny):
    a = write_random_checkpoint(tmp_path / "a", tiny, seed=7)
    b = write_random_checkpoint(tmp_path / "b", tiny, seed=7)
    c = write_random_checkpoint(tmp_path / "c", tiny, seed=8)
    s = write_random_checkpoint(tmp_path / "s", tiny, seed=7, max_shard_bytes=40_000)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    shards = sorted(p.name for p in s.glob("*.safetensors"))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((s / "model.safetensors.index.json").read_text())
    ca, cs = Checkpoint.open(a), Checkpoint.open(s)
    assert index["metadata"]["total_size"] == ca.nbytes == cs.nbytes
    assert ca.names() == cs.names() and len(cs.files) == len(shards)
    for n in ca.names():
        np.testing.assert_array_equal(ca.raw(n), cs.raw(n))
    assert cross_check(tiny, cs).ok


def test_random_logits_are_not_degenerate(tiny):
    """With tied embeddings a random model tends to echo its input token (logit |E[t]|² / rms(x)); the weight
    scales must keep that below the spread of the other logits even for a small vocabulary."""
    c = tiny.replace(tie_word_embeddings=True, vocab_size=265)
    w = {n: random_tensor(n, s, c, 0) for n, s in expected_tensors(c).items()}
    emb = w["model.embed_tokens.weight"]
    h = emb.copy()  # every token as a one-token prompt
    for i in range(c.num_hidden_layers):  # MLP-only residual stream: enough to see the scale matters
        p = f"model.layers.{i}.mlp."
        x = h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-6)
        g, u = x @ w[p + "gate_proj.weight"].T, x @ w[p + "up_proj.weight"].T
        h = h + (g / (1 + np.exp(-g)) * u) @ w[p + "down_proj.weight"].T
    picks = (h @ emb.T).argmax(-1)
    assert (picks == np.arange(265)).mean() < 0.2  # not an echo
    assert len(set(picks.tolist())) > 30  # and not one token for everything


@pytest.mark.parametrize("bits,group", [(4, 64), (8, 32), (4, 32)])
def test_quantized_layout(tmp_path, tiny, bits, group):
    d = write_random_checkpoint(tmp_path / "q", tiny, quantize=bits, group_size=group)
    cfg = load_config(d)
    assert cfg.quantization == {"group_size": group, "bits": bits}
    ck = Checkpoint.open(d)
    r = cross_check(cfg, ck, strict=True)
    assert r.ok and r.dtypes["U32"] == 2 * 7 + 2  # 7 linears per block, embedding, lm_head
    name = "model.layers.0.self_attn.q_proj.weight"
    assert ck.info(name).shape == (128, 64 * bits // 32) and ck.is_quantized(name)
    assert not ck.is_quantized("model.norm.weight")
    exact = random_tensor(name, (128, 64), tiny, 0)
    w = ck.get(name, dequantize=True)
    scale = np.repeat(ck.get(name.replace("weight", "scales")), group, axis=1)
    assert w.shape == (128, 64) and np.all(
        np.abs(w - exact) <= np.abs(scale) * 1.01 + 1e-2
    )  # one step: quantize's docstring


def test_cross_check_finds_missing_unexpected_and_misshaped(tmp_path, tiny):
    d = write_random_checkpoint(tmp_path / "m", tiny)
    ck = Checkpoint.open(d)
    tensors = {n: np.array(ck.raw(n)) for n in ck.names()}
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    tensors["model.layers.0.mlp.up_proj.weight"] = np.zeros((128, 32), np.uint16)
    tensors["model.layers.9.extra.weight"] = np.zeros(3, np.float32)
    dtypes = {n: ck.info(n).dtype for n in tensors if n in ck}
    save_safetensors(d / "model.safetensors", tensors, dtypes)
    r = cross_check(tiny, Checkpoint.open(d))
    assert not r.ok and r.verdict == "FAILED: 1 missing, 1 unexpected, 1 mis-shaped"
    assert r.missing == [("model.layers.1.self_attn.k_norm.weight", (32,))]
    assert r.unexpected == ["model.layers.9.extra.weight"]
    assert r.mismatched == [("model.layers.0.mlp.up_proj.weight", (128, 64), (128, 32))]
    with pytest.raises(CrossCheckError, match="k_norm"):
        cross_check(tiny, Checkpoint.open(d), strict=True)


def test_tied_config_flags_a_stray_lm_head(tmp_path, tiny):
    d = write_random_checkpoint(tmp_path / "m", tiny)  # untied: has lm_head
    r = cross_check(tiny.replace(tie_word_embeddings=True), Checkpoint.open(d))
    assert r.unexpected == ["lm_head.weight"] and r.tied


def test_bad_shard_indexes(tmp_path, tiny):
    d = write_random_checkpoint(tmp_path / "s", tiny, max_shard_bytes=40_000)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in d.glob("*.safetensors"))
    (d / shards[1]).unlink()
    with pytest.raises(SafetensorsError, match=rf"shard '{shards[1]}' \(holding tensor '.*'\) does not exist"):
        Checkpoint.open(d)
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != shards[1]}
    index["weight_map"]["model.layers.0.ghost.weight"] = shards[0]
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SafetensorsError, match="names tensor 'model.layers.0.ghost.weight'.*no such tensor"):
        Checkpoint.open(d)
    (d / "model.safetensors.index.json").write_text("[]")
    with pytest.raises(SafetensorsError, match="weight_map"):
        Checkpoint.open(d)


def test_open_errors(tmp_path, tiny):
    with pytest.raises(WeightsError, match="no such file"):
        Checkpoint.open(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightsError, match="no \\*.safetensors"):
        Checkpoint.open(tmp_path / "empty")
    d = write_random_checkpoint(tmp_path / "m", tiny)
    with pytest.raises(WeightsError, match="no tensor named 'nope'"):
        Checkpoint.open(d).get("nope")
    assert Checkpoint.open(d / "model.safetensors").names() == Checkpoint.open(d).names()


def test_writer_refuses_to_clobber_and_leaves_nothing_on_failure(tmp_path, tiny):
    d = write_random_checkpoint(tmp_path / "m", tiny)
    with pytest.raises(WeightsError, match="not empty"):
        write_random_checkpoint(d, tiny)
    with pytest.raises(WeightsError, match="no tokenizer.json"):
        write_random_checkpoint(tmp_path / "n", tiny, tokenizer=tmp_path / "m")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    with pytest.raises(WeightsError, match="dtype 'int8'"):
        write_random_checkpoint(tmp_path / "n", tiny, dtype="int8")
    write_random_checkpoint(d, tiny, seed=1, overwrite=True)
    assert set(Checkpoint.open(d).names()) == set(expected_tensors(tiny))


def test_written_files_get_ordinary_permissions(tmp_path, tiny):
    import os

    old = os.umask(0o022)
    try:
        d = write_random_checkpoint(tmp_path / "m", tiny)
    finally:
        os.umask(old)
    assert d.stat().st_mode & 0o777 == 0o755
    assert (d / "model.safetensors").stat().st_mode & 0o777 == 0o644


def test_byte_tokenizer_is_a_real_qwen3_style_tokenizer(tmp_path, tiny):
    from tokenizers import Tokenizer

    from fs_weights.byte_tokenizer import IM_END, VOCAB_SIZE

    d = write_random_checkpoint(tmp_path / "b", tiny.replace(vocab_size=VOCAB_SIZE), tokenizer="bytes")
    cfg, gen = json.loads((d / "config.json").read_text()), json.loads((d / "generation_config.json").read_text())
    assert cfg["eos_token_id"] == IM_END and gen["eos_token_id"] == [258, 256]
    hf = Tokenizer.from_file(str(d / "tokenizer.json"))
    text = "héllo 中文 😀<|im_end|>"
    ids = hf.encode(text, add_special_tokens=False).ids
    assert ids == [*list("héllo 中文 😀".encode()), IM_END]
    assert hf.decode(ids, skip_special_tokens=False) == text
    assert "chat_template" in json.loads((d / "tokenizer_config.json").read_text())
    with pytest.raises(WeightsError, match="too small for the byte tokenizer"):
        write_random_checkpoint(tmp_path / "c", tiny.replace(vocab_size=100), tokenizer="bytes")
