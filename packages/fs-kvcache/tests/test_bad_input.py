"""Prompt-cache files that are damaged, forged or made for something else: one ``KVCacheError`` naming the file
(and the layer), never a traceback, and never a cache silently filled with NaN."""

import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from fs_kvcache import KVCacheError, identity_string, load_prompt_cache, save_prompt_cache
from fs_kvcache.prompt_cache import _digest

IDENT = identity_string(weights="w" * 64, tokenizer="t" * 64, checkpoint="c")
META = {"fs_identity": IDENT, "fs_format": "fs-prompt-cache/2", "fs_layers": "2", "fs_dtype": "float32"}


def state(n=3, dtype=np.float32):
    rng = np.random.default_rng(0)
    return [tuple(rng.standard_normal((1, 2, n, 4)).astype(dtype) for _ in "kv") for _ in range(2)]


def write(path, tensors, **meta):
    """The file as fs would write it (its digest over what is stored), unless ``meta`` says otherwise."""
    n = sum(name.startswith("layer.") for name in tensors) // 2
    layers = [
        (tensors[f"layer.{i}.keys"], tensors[f"layer.{i}.values"]) for i in range(n) if f"layer.{i}.keys" in tensors
    ]
    save_file(tensors, str(path), metadata=META | {"fs_digest": _digest(tensors["tokens"], layers)} | meta)
    return path


def tensors(n=3, dtype=np.float32):
    out = {"tokens": np.arange(n, dtype=np.int64)}
    for i, (k, v) in enumerate(state(n, dtype)):
        out[f"layer.{i}.keys"], out[f"layer.{i}.values"] = k, v
    return out


def test_a_good_file_loads(tmp_path):
    save_prompt_cache(tmp_path / "p.safetensors", [0, 1, 2], state(), IDENT)
    tokens, layers, dtype = load_prompt_cache(tmp_path / "p.safetensors", IDENT)
    assert tokens == [0, 1, 2] and len(layers) == 2 and dtype == "float32"


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_keys_or_values_are_refused(tmp_path, value):
    t = tensors()
    t["layer.1.values"][0, 1, 2, 3] = value
    with pytest.raises(KVCacheError, match=r"p.safetensors: layer.1.values: holds (nan|inf|NaN)"):
        load_prompt_cache(write(tmp_path / "p.safetensors", t), IDENT)


@pytest.mark.parametrize("value", [1e30, -7e4])
def test_absurd_keys_or_values_are_refused(tmp_path, value):
    t = tensors()
    t["layer.0.keys"][0, 0, 1, 2] = value
    with pytest.raises(KVCacheError, match=r"layer.0.keys: holds .* \(\|K/V\| must be finite and at most 65504\)"):
        load_prompt_cache(write(tmp_path / "p.safetensors", t), IDENT)


def test_token_ids_edited_under_their_keys_and_values_are_refused(tmp_path):
    save_prompt_cache(tmp_path / "p.safetensors", [5, 6, 7], state(), IDENT)
    from safetensors import safe_open
    from safetensors.numpy import load_file

    t = load_file(str(tmp_path / "p.safetensors"))
    with safe_open(str(tmp_path / "p.safetensors"), framework="numpy") as f:
        meta = f.metadata()
    t["tokens"] = np.array([5, 9, 7], np.int64)  # same length, so every shape still agrees
    save_file(t, str(tmp_path / "p.safetensors"), metadata=meta)
    with pytest.raises(KVCacheError, match="fs_digest does not match the token ids and K/V stored"):
        load_prompt_cache(tmp_path / "p.safetensors", IDENT)


def test_a_file_from_the_older_format_says_to_make_it_again(tmp_path):
    with pytest.raises(KVCacheError, match="written by an older fs: make it again"):
        load_prompt_cache(write(tmp_path / "p.safetensors", tensors(), fs_format="fs-prompt-cache/1"), IDENT)


def test_saving_over_something_that_is_not_a_regular_file_is_refused(tmp_path):
    import os

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(KVCacheError, match="fifo: exists and is not a regular file"):
        save_prompt_cache(tmp_path / "fifo", [0, 1, 2], state(), IDENT)
    assert not [p for p in tmp_path.iterdir() if p.name != "fifo"]  # no temporary file left behind


def test_non_finite_bfloat16_bits_are_refused(tmp_path):
    t = {"tokens": np.arange(3, dtype=np.int64)}
    for i in range(2):
        t[f"layer.{i}.keys"] = t[f"layer.{i}.values"] = np.full((1, 2, 3, 4), 0x3F80, np.uint16)  # 1.0
    t["layer.0.keys"] = t["layer.0.keys"].copy()
    t["layer.0.keys"][0, 0, 0, 0] = 0x7FC0  # bf16 NaN
    with pytest.raises(KVCacheError, match="layer.0.keys: holds NaN"):
        load_prompt_cache(write(tmp_path / "p.safetensors", t, fs_dtype="bfloat16"), IDENT)


@pytest.mark.parametrize(
    "edit,words",
    [
        (lambda t, m: m.update(fs_identity=identity_string(weights="x" * 64)), "made with .*other weights; refusing"),
        (lambda t, m: m.update(fs_format="other/1"), "not a prompt-cache file"),
        (lambda t, m: m.update(fs_layers="x"), "fs_layers 'x' / fs_dtype 'float32' are not"),
        (lambda t, m: m.update(fs_layers="0"), "fs_layers '0'"),
        (lambda t, m: m.update(fs_dtype="int8"), "fs_dtype 'int8'"),
        (lambda t, m: m.update(fs_layers="3"), "not a readable prompt-cache file"),  # layer.2 is missing
        (lambda t, m: t.update(tokens=np.arange(4, dtype=np.int64)), r"layer.0.keys: float32 \(1, 2, 3, 4\)"),
        (lambda t, m: t.update(tokens=np.array([0, -1, 2], np.int64)), "'tokens' must be a 1-D int64 array"),
        (lambda t, m: t.update({"layer.1.keys": np.zeros((1, 2, 3, 4), np.float16)}), "layer.1.keys: float16"),
    ],
)
def test_inconsistent_files_are_refused(tmp_path, edit, words):
    t, meta = tensors(), dict(META)
    edit(t, meta)
    with pytest.raises(KVCacheError, match=words):
        load_prompt_cache(write(tmp_path / "p.safetensors", t, **meta), IDENT)


@pytest.mark.parametrize(
    "data",
    [b"", b"garbage", struct.pack("<Q", 10**12), struct.pack("<Q", 200_004) + b"[" * 100_000 + b"]" * 100_000],
    ids=["empty", "garbage", "huge-header", "deep-header"],
)
def test_damaged_files_are_refused(tmp_path, data):
    (tmp_path / "p.safetensors").write_bytes(data)
    with pytest.raises(KVCacheError, match="p.safetensors: not a readable prompt-cache file"):
        load_prompt_cache(tmp_path / "p.safetensors", IDENT)


def test_a_missing_file_and_a_directory(tmp_path):
    for p in (tmp_path / "absent.safetensors", tmp_path):
        with pytest.raises(KVCacheError, match="not a readable prompt-cache file"):
            load_prompt_cache(p, IDENT)
