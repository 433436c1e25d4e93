"""Which quantized tensors of a GGUF file hold codes in fewer bits than their repack (``Checkpoint.code_bits``): GGUF's
5- and 6-bit types, repacked exactly as 8-bit codes, so a loader can keep them in their own bits (fs-model packs them);
every other type, and a safetensors checkpoint, says None."""

import numpy as np
import pytest

from fs_weights import Checkpoint
from fs_weights.gguf_file import GGUFFile

gguf = pytest.importorskip("gguf", reason="gguf is fs-weights' [gguf] extra")
T = gguf.GGMLQuantizationType
TYPES = {"attn_q": (T.Q6_K, 6), "attn_k": (T.Q5_0, 5), "attn_v": (T.Q5_K, 5), "attn_output": (T.Q4_K, None),
         "ffn_gate": (T.Q8_0, None), "ffn_up": (T.Q5_1, 5)}  # fmt: skip


def test_the_5_and_6_bit_types_say_so(tmp_path):
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3")
    rng = np.random.default_rng(0)
    for name, (kind, _) in TYPES.items():
        size, per = gguf.GGML_QUANT_SIZES[kind]
        raw = rng.integers(0, 256, size=(4, 256 // size * per), dtype=np.uint8)
        for at in {T.Q6_K: (208,), T.Q5_K: (0, 2), T.Q4_K: (0, 2)}.get(kind, ()):  # small finite float16 factors
            raw.reshape(4, -1, per)[..., at : at + 2] = np.full((1,), 1e-3, np.float16).view(np.uint8)
        if kind not in (T.Q6_K, T.Q5_K, T.Q4_K):  # the first two bytes of each block are its float16 scale
            raw.reshape(4, -1, per)[..., 0:2] = np.full((1,), 1e-3, np.float16).view(np.uint8)
            if kind == T.Q5_1:
                raw.reshape(4, -1, per)[..., 2:4] = np.full((1,), 1e-3, np.float16).view(np.uint8)
        w.add_tensor(f"blk.0.{name}.weight", raw, raw_dtype=kind)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(256, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    f = GGUFFile(path)
    got = {n.split(".")[-2]: f.code_bits(n) for n in f if n.endswith(".weight") and "norm" not in n}
    assert sorted(got.values(), key=str) == sorted((b for _, b in TYPES.values()), key=str)
    assert f.code_bits("model.layers.0.input_layernorm.weight") is None
    parts = [n for n in f if n.endswith((".scales", ".biases"))]
    assert parts and all(f.code_bits(n) is None for n in parts)  # only the codes say


def test_a_safetensors_checkpoint_says_none(tmp_path):
    from fs_weights import preset, write_random_checkpoint

    src = write_random_checkpoint(tmp_path / "q", preset("tiny"), dtype="bfloat16", quantize=4)
    with Checkpoint.open(src) as ck:
        quantized = [n for n in ck.names() if ck.is_quantized(n)]
        assert quantized and all(ck.code_bits(n) is None for n in quantized)
