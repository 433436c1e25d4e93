"""Embeddings (embedding.py): the final norm's output at the last token, L2-normalized - checked against mlx-lm's own
Qwen3 network read the same way, for inputs of different lengths batched together, and for a headless checkpoint
(transformers' Qwen3Model names, as Qwen3-Embedding ships)."""

import json
import shutil

import numpy as np
import pytest

from fs_generate import Engine, GenerateError, load
from fs_generate.embedding import appended_tokens, embed, ids, is_embedding_model

TEXTS = ["a cat", "A kitten sat on the warm windowsill all afternoon.", "你好"]


@pytest.fixture(scope="module")
def loaded(tiny_dir):
    return load(str(tiny_dir))


def headless_copy(src, dst):
    """``src``'s weights under Qwen3Model's names: no "model." prefix, no lm_head (what AutoModel saves)."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dst)
    for f in dst.glob("*.safetensors"):
        tensors = load_file(f)
        save_file({k.removeprefix("model."): v for k, v in tensors.items() if k != "lm_head.weight"}, f)
    index = dst / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"] = {
            k.removeprefix("model."): v for k, v in data["weight_map"].items() if k != "lm_head.weight"
        }
        index.write_text(json.dumps(data))
    return dst


@pytest.mark.parity
def test_vectors_are_mlx_lms_last_hidden_state_normalized(tiny_dir, loaded, reference):
    mx = reference("mlx.core")
    from mlx_lm import load as mlx_load

    model, tok = loaded
    ref, _ = mlx_load(str(tiny_dir))
    rows = [ids(tok, t) for t in TEXTS]
    got = embed(model, rows)  # batched, left-padded
    for row, vec in zip(rows, got, strict=True):
        h = np.array(ref.model(mx.array([row]))[0, -1].astype(mx.float32), dtype=np.float64)
        np.testing.assert_allclose(vec, h / np.linalg.norm(h), rtol=1e-5, atol=1e-6)  # float32 weights


def test_batched_equals_alone_order_kept_and_dimensions_truncate_then_renormalize(loaded):
    model, tok = loaded
    rows = [ids(tok, t) for t in TEXTS]
    together = embed(model, rows)
    for i, row in enumerate(rows):
        np.testing.assert_allclose(together[i], embed(model, [row])[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, rtol=1e-6)
    h = model.last_hidden(model.tokens_array([rows[1]])).astype(np.float64)[0, :16]
    np.testing.assert_allclose(embed(model, [rows[1]], dimensions=16)[0], h / np.linalg.norm(h), rtol=1e-5, atol=1e-6)


def test_a_headless_checkpoint_loads_under_the_causal_names_and_embeds_the_same(tiny_dir, loaded, tmp_path):
    model, tok = loaded
    d = headless_copy(tiny_dir, tmp_path / "headless")
    assert is_embedding_model(d) and not is_embedding_model(tiny_dir)
    other, _ = load(str(d))
    rows = [ids(tok, t) for t in TEXTS]
    assert np.array_equal(embed(other, rows), embed(model, rows))  # the same weights: the same bits
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "modules.json").write_text("[]")
    (tmp_path / "st" / "1_Pooling").mkdir()
    (tmp_path / "st" / "1_Pooling" / "config.json").write_text('{"pooling_mode_lasttoken": true}')
    assert is_embedding_model(tmp_path / "st")


def test_the_post_processors_appended_token_is_added(loaded):
    _, tok = loaded
    assert appended_tokens(tok) == []  # Qwen3's generation tokenizer: ByteLevel, nothing appended

    template = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}},
                                                         {"SpecialToken": {"id": "<|endoftext|>"}}]}  # fmt: skip

    class WithTemplate:  # Qwen3-Embedding's tokenizer.json: ByteLevel, then TemplateProcessing "$A <|endoftext|>"
        def __init__(self):
            self.spec = {"post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel"}, template]}}
            self.encode, self.token_to_id = tok.encode, tok.token_to_id

    assert ids(WithTemplate(), "hi") == [*tok.encode("hi"), tok.token_to_id("<|endoftext|>")]


def test_the_engine_embeds_between_steps_and_bad_input_is_named(loaded):
    model, tok = loaded
    rows = [ids(tok, t) for t in TEXTS]
    engine = Engine(model, tok, max_batch=2, kv_budget_bytes=32 * model.kv_block_bytes(16))
    engine.start()
    try:
        assert np.array_equal(engine.embed(rows).result(timeout=60), embed(model, rows))
        with pytest.raises(GenerateError, match="dimensions must be an int in"):
            engine.embed(rows, dimensions=0).result(timeout=60)
    finally:
        engine.stop()
    for bad, words in [([[]], "at least one token"), ([[1, 10**8]], "input 0: token id 100000000 at position 1")]:
        with pytest.raises(GenerateError, match=words):
            embed(model, bad)
