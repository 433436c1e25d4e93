"""fs-generate on a tiny random Qwen3 with the real tokenizer: both backends, cache on/off, and mlx-lm parity."""

import json

import numpy as np
import pytest

from fs_generate import GenerateError, generate, load, stream_generate
from fs_generate.stopping import model_eos_ids

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def numpy_pair(tiny_dir):
    return load(str(tiny_dir))


def test_eos_set_is_the_union_of_generation_config_and_config(tiny_dir, numpy_pair):
    model, tok = numpy_pair
    cfg = json.loads((tiny_dir / "config.json").read_text())["eos_token_id"]
    gen = json.loads((tiny_dir / "generation_config.json").read_text())["eos_token_id"]
    assert model_eos_ids(model, tok) == frozenset([cfg, *gen]) == {151643, 151645}


def test_cached_equals_uncached_and_stream_equals_decode(numpy_pair):
    model, tok = numpy_pair
    a = generate(model, tok, PROMPT, max_new_tokens=16, eos_token_ids=[])
    b = generate(model, tok, PROMPT, max_new_tokens=16, eos_token_ids=[], use_cache=False)
    assert a.token_ids == b.token_ids and len(a.token_ids) == 16
    steps = list(stream_generate(model, tok, PROMPT, max_new_tokens=16, eos_token_ids=[]))
    assert [s.token_id for s in steps] == a.token_ids
    known = [i for i in a.token_ids if i < tok.vocab_size]
    if len(known) == len(a.token_ids):
        assert "".join(s.text for s in steps) == tok.decode(a.token_ids) == a.text
    assert len(set(a.token_ids)) > 4  # a random model with these weight scales does not repeat one token
    np.testing.assert_allclose(sum(a.logprobs), sum(s.logprob for s in steps), rtol=1e-6)


def test_chat_prompt_and_sampling_are_reproducible(numpy_pair):
    model, tok = numpy_pair
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True)
    a = generate(model, tok, ids, max_new_tokens=10, temperature=0.8, top_p=0.9, seed=5)
    b = generate(model, tok, ids, max_new_tokens=10, temperature=0.8, top_p=0.9, seed=5)
    assert a.token_ids == b.token_ids and a.prompt_ids == ids


_LOADED: dict = {}  # each model (and its tokenizer) loaded once for the six cases below: loading is most of a case


def _loaded(key, make):
    if key not in _LOADED:
        _LOADED[key] = make()
    return _LOADED[key]


@pytest.mark.parity
@pytest.mark.parametrize("backend", ["numpy", "mlx"])
@pytest.mark.parametrize("prompt", [PROMPT, "def fibonacci(n):", "<|im_start|>user\n你好<|im_end|>\n"])
def test_greedy_ids_equal_mlx_lm(tiny_dir, reference, backend, prompt):
    mx = reference("mlx.core")
    mlx_lm = reference("mlx_lm")
    from mlx_lm.generate import generate_step

    ref_model, ref_tok = _loaded(("mlx_lm", str(tiny_dir)), lambda: mlx_lm.load(str(tiny_dir)))
    ids = ref_tok.encode(prompt)
    want = [int(step[0]) for step in generate_step(mx.array(ids), ref_model, max_tokens=32)]
    model, tok = _loaded((backend, str(tiny_dir)), lambda: load(str(tiny_dir), backend=backend, dtype="float32"))
    assert tok.encode(prompt) == ids
    got = generate(model, tok, prompt, max_new_tokens=32, eos_token_ids=[]).token_ids
    assert got == want


def test_model_resolution_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(GenerateError, match="'Qwen/Qwen3-0.6B' was not found in the local Hugging Face cache.*--model"):
        load("Qwen/Qwen3-0.6B")
    with pytest.raises(GenerateError, match="no such model directory"):
        load(str(tmp_path / "missing" / "dir"))


def test_model_id_resolves_from_the_local_cache(tmp_path, monkeypatch, tiny_dir):
    """The Hugging Face cache layout: models--org--name/{refs/main, snapshots/<rev>/files}."""
    hub = tmp_path / "hub"
    snap = hub / "models--acme--tiny-qwen3" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for f in tiny_dir.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (hub / "models--acme--tiny-qwen3" / "refs").mkdir()
    (hub / "models--acme--tiny-qwen3" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    model, tok = load("acme/tiny-qwen3")
    assert model.config.vocab_size == 151936 and tok.encode("hello world") == [14990, 1879]


def test_the_readme_main_job_model(tmp_path):
    """The fresh-machine main job: tiny preset + built-in byte tokenizer (265 ids), tied embeddings. Greedy on a
    random map over so few ids falls into a cycle within a few dozen steps (iterating a random function on a
    finite set always does), so the README samples; the sampled stream must not collapse to one token."""
    from fs_weights import preset, write_random_checkpoint
    from fs_weights.byte_tokenizer import VOCAB_SIZE

    d = write_random_checkpoint(tmp_path / "b", preset("tiny", vocab_size=VOCAB_SIZE), tokenizer="bytes")
    model, tok = load(str(d))
    g = generate(model, tok, "Hello, Qwen3", max_new_tokens=40, eos_token_ids=[], temperature=0.8, seed=0)
    assert len(set(g.token_ids)) > 15 and max(g.token_ids.count(t) for t in g.token_ids) < 10
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True)
    assert tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_the_shipped_byte_tokenizer_files_use_fs_tokenizers_tables():
    """fs-weights ships the byte tokenizer as data; its byte table and split pattern are fs-tokenizer's."""
    import json

    from fs_tokenizer.bytelevel import BYTE_TO_CHAR
    from fs_tokenizer.pipeline import QWEN2_PATTERN
    from fs_weights.byte_tokenizer import FILES, SPECIALS, VOCAB_SIZE

    spec = json.loads((FILES / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["model"]["vocab"] == {c: b for b, c in BYTE_TO_CHAR.items()}
    assert spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == QWEN2_PATTERN
    assert [t["content"] for t in spec["added_tokens"]] == SPECIALS
    assert len(spec["model"]["vocab"]) + len(spec["added_tokens"]) == VOCAB_SIZE
