"""``max_kv_size`` / ``--max-kv-size`` (mlx-lm's meaning): a rotating cache holding the first 4 positions and a
sliding window. Proven against mlx-lm's own RotatingKVCache on the same checkpoint, step by step."""

import json

import numpy as np
import pytest

from fs_generate import generate, load
from fs_generate.cli import main

PROMPT = "The quick brown fox jumps over the lazy dog and keeps on running. " * 3  # 43 tokens > the window


def fs_logits(model, ids, tokens, N):
    """Teacher-forced: the prompt as one chunk, then ``tokens`` one at a time, through a rotating cache."""
    caches = model.make_cache("rotating", max_size=N, keep=4)
    out = [model(model.tokens_array([ids]), 0, caches, logits_to_keep=1)]
    out += [model(model.tokens_array([[t]]), len(ids) + i, caches, logits_to_keep=1) for i, t in enumerate(tokens)]
    return [np.asarray(model.to_numpy(o), dtype=np.float32)[0, -1] for o in out]


@pytest.mark.parity
@pytest.mark.parametrize("backend", ["numpy", "mlx"])
def test_the_window_is_mlx_lms_step_by_step(tiny_dir, reference, backend):
    mx = reference("mlx.core")
    mlx_lm = reference("mlx_lm")
    from mlx_lm.models.cache import make_prompt_cache

    N = 24
    model, tok = load(str(tiny_dir), backend=backend, dtype="float32")
    ids = tok.encode(PROMPT)
    g = generate(model, tok, ids, max_new_tokens=60, eos_token_ids=[], max_kv_size=N)
    theirs, _ = mlx_lm.load(str(tiny_dir))
    cache = make_prompt_cache(theirs, max_kv_size=N)
    ref = [np.array(theirs(mx.array([ids]), cache=cache)[0, -1])]
    ref += [np.array(theirs(mx.array([[t]]), cache=cache)[0, -1]) for t in g.token_ids[:-1]]
    assert [int(r.argmax()) for r in ref] == g.token_ids  # greedy through the window: mlx-lm's tokens
    ours = fs_logits(model, ids, g.token_ids[:-1], N)
    assert max(np.abs(a - b).max() / np.abs(b).max() for a, b in zip(ours, ref, strict=True)) <= 1e-5


def test_the_window_changes_generation_and_bounds_memory(tiny_dir):
    model, tok = load(str(tiny_dir))
    ids = tok.encode(PROMPT)
    bounded = generate(model, tok, ids, max_new_tokens=40, eos_token_ids=[], max_kv_size=16)
    full = generate(model, tok, ids, max_new_tokens=40, eos_token_ids=[])
    assert bounded.token_ids != full.token_ids and len(bounded.token_ids) == 40
    caches = model.make_cache("rotating", max_size=16, keep=4)
    for t, token in enumerate(ids):  # token by token: a layer never holds more than 16 positions
        model(model.tokens_array([[token]]), t, caches, logits_to_keep=1)
        assert caches[0].n == min(t + 1, 16)


@pytest.mark.kernels
def test_the_fast_kernels_run_the_window_like_the_reference(tmp_path, qwen3_tokenizer_dir):
    """bf16 weights on the numba kernels (decode reads the ring in place) vs float32 copies (BLAS): within bf16
    tolerance at every step."""
    from fs_model import cpu
    from fs_weights import preset, write_random_checkpoint

    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: the kernels are tested by `nox -s kernels`")
    d = write_random_checkpoint(tmp_path / "bf16", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir)
    fast, tok = load(str(d))
    slow, _ = load(str(d), dtype="float32")
    ids = tok.encode(PROMPT)
    tokens = generate(slow, tok, ids, max_new_tokens=30, eos_token_ids=[], max_kv_size=20).token_ids
    a, b = fs_logits(fast, ids, tokens, 20), fs_logits(slow, ids, tokens, 20)
    assert max(np.abs(x - y).max() / np.abs(y).max() for x, y in zip(a, b, strict=True)) <= 2e-2


def test_cli_max_kv_size_rotates_and_max_context_stops(tiny_dir, capsys):
    base = ["--model", str(tiny_dir), "-p", PROMPT, "--raw", "-m", "30", "--eos-token-id", "0", "--json"]
    assert main([*base, "--max-kv-size", "16"]) == 0
    rotated = json.loads(capsys.readouterr().out)
    assert rotated["finish_reason"] == "length" and len(rotated["token_ids"]) == 30
    assert main([*base, "--max-context", "50"]) == 0
    stopped = json.loads(capsys.readouterr().out)
    assert stopped["finish_reason"] == "context" and stopped["prompt_tokens"] + len(stopped["token_ids"]) == 50
    assert main([*base[:1], "/nonexistent", *base[2:], "--max-kv-size", "4"]) == 2  # refused before loading
    assert "--max-kv-size must be more than 4" in capsys.readouterr().err
