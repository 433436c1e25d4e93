"""``kv_bits`` / ``--kv-bits`` (mlx-lm's): the KV cache kept as affine codes once it holds ``quantized_kv_start``
positions. Proven against mlx-lm's own ``generate_step(kv_bits=...)`` on the same checkpoint, token for token."""

import json

import numpy as np
import pytest

from fs_generate import generate, generate_batch, load
from fs_generate.cli import main
from fs_kvcache import DenseKVCache, QuantizedKVCache

PROMPT = "The quick brown fox jumps over the lazy dog and keeps on running. " * 2


@pytest.mark.parity
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("backend", ["numpy", "mlx"])
def test_generation_is_mlx_lms_with_the_same_kv_bits(tiny_dir, reference, backend, bits):
    """A start past the prompt, so both quantize at the same decode step (mlx-lm prefills all but the last prompt
    token in one pass, fs the whole prompt: with a start inside the prompt the two would quantize one pass apart)."""
    mx = reference("mlx.core")
    model, tok = load(str(tiny_dir), backend=backend, dtype="float32")
    ids = tok.encode(PROMPT)
    kw = dict(kv_bits=bits, kv_group_size=32, quantized_kv_start=len(ids) + 3)
    g = generate(model, tok, ids, max_new_tokens=40, eos_token_ids=[], **kw)
    theirs, _ = reference("mlx_lm.utils").load_model(tiny_dir)  # the weights only: the ids are given
    steps = reference("mlx_lm.generate").generate_step(mx.array(ids), theirs, max_tokens=40, **kw)
    want = [(int(t), float(lp[t])) for t, lp in steps]
    assert g.token_ids == [t for t, _ in want]
    err = np.abs(np.subtract(g.logprobs, [lp for _, lp in want])).max()
    # the logits are mlx-lm's bits on MLX (fs-model's test); the logprob is taken in numpy here, in MLX there
    assert err <= (1e-4 if backend == "mlx" else 1e-3), err
    exact = generate(model, tok, ids, max_new_tokens=40, eos_token_ids=[])
    assert exact.logprobs != g.logprobs  # the codes were used


def test_the_cache_is_quantized_from_the_start_position_on(tiny_dir):
    model, tok = load(str(tiny_dir))
    ids = tok.encode(PROMPT)
    late = generate(model, tok, ids, max_new_tokens=5, kv_bits=4, kv_group_size=32, quantized_kv_start=10_000)
    exact = generate(model, tok, ids, max_new_tokens=5)
    assert late.token_ids == exact.token_ids and late.logprobs == exact.logprobs  # never reached: exact
    from fs_generate.generate import Generator

    g = Generator(model, tok, ids, max_new_tokens=5, kv_bits=4, kv_group_size=32, quantized_kv_start=0)
    list(g.steps())
    assert g.caches is not None and all(type(c) is QuantizedKVCache for c in g.caches)
    dense = Generator(model, tok, ids, max_new_tokens=5)
    list(dense.steps())
    assert dense.caches is not None and type(dense.caches[0]) is DenseKVCache
    assert g.caches[0].nbytes * 4 < dense.caches[0].nbytes  # 4-bit codes vs float32


def test_bad_combinations_are_refused(tiny_dir):
    from fs_generate import GenerateError

    model, tok = load(str(tiny_dir))
    with pytest.raises(GenerateError, match="kv_bits must be one of"):
        generate(model, tok, "hi", max_new_tokens=2, kv_bits=3)
    with pytest.raises(GenerateError, match="does not divide this model's head_dim 32"):
        generate(model, tok, "hi", max_new_tokens=2, kv_bits=4, kv_group_size=64)
    with pytest.raises(GenerateError, match="no max_kv_size"):
        generate(model, tok, "hi", max_new_tokens=2, kv_bits=4, kv_group_size=32, max_kv_size=16)
    from fs_generate.chat_session import ChatSession

    with pytest.raises(GenerateError, match="a chat keeps exact K/V"):
        ChatSession(model, tok, max_new_tokens=2, kv_bits=4)


@pytest.mark.kernels
def test_a_batch_with_kv_bits_equals_each_prompt_alone_on_the_fast_kernels(tmp_path, qwen3_tokenizer_dir):
    from fs_model import cpu
    from fs_weights import preset, write_random_checkpoint

    assert cpu.HAVE_NUMBA, "numba is not installed: the kernels session installs fs-model[fast]"
    d = write_random_checkpoint(tmp_path / "bf16", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir)
    model, tok = load(str(d))
    prompts = ["Hello there", PROMPT, "def f(x):"]
    kw = dict(max_new_tokens=12, eos_token_ids=[], kv_bits=4, kv_group_size=32, quantized_kv_start=0)
    batch = generate_batch(model, tok, prompts, **kw)
    for p, b in zip(prompts, batch, strict=True):
        solo = generate(model, tok, p, **kw)
        assert (b.token_ids, b.logprobs) == (solo.token_ids, solo.logprobs)


def test_cli_kv_bits(tiny_dir, capsys):
    base = ["--model", str(tiny_dir), "-p", PROMPT, "--raw", "-m", "12", "--eos-token-id", "0", "--json"]
    assert main([*base, "--kv-bits", "4", "--kv-group-size", "32", "--quantized-kv-start", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    model, tok = load(str(tiny_dir))
    want = generate(model, tok, PROMPT, max_new_tokens=12, eos_token_ids=[0], kv_bits=4, kv_group_size=32)
    assert out["token_ids"] == want.token_ids
    missing = ["--model", "/nonexistent", "-p", "x"]
    assert main([*missing, "--kv-bits", "4", "--max-kv-size", "64"]) == 2  # refused before loading
    assert "--kv-bits and --max-kv-size cannot be combined" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([*missing, "--kv-bits", "3"])
    assert e.value.code == 2 and "--kv-bits" in capsys.readouterr().err
    assert main([*base, "--kv-bits", "8"]) == 2  # group 64 > head_dim 32: one line, no traceback
    err = capsys.readouterr().err
    assert "does not divide this model's head_dim 32" in err and "Traceback" not in err


def test_a_reused_prefix_is_converted_by_the_same_rule(tiny_dir):
    """A prompt-cache file's K/V load exact and follow the rule a cold run's caches follow. With a start past the
    prompt both runs read exact K/V for the whole prompt and quantize at the same decode step: equal to rounding.
    With start=0 the loaded prefix is quantized before the first pass reads it, as a cold run's would be."""
    from fs_generate.reused_prefix import KVPrefix, prefill_state
    from fs_generate.step import generate_step

    model, tok = load(str(tiny_dir))
    ids = tok.encode(PROMPT)
    state = prefill_state(model, ids[:20])
    prefix = KVPrefix(ids[:20], state)
    late = dict(max_new_tokens=16, eos_token_ids=[], kv_bits=4, kv_group_size=32, quantized_kv_start=len(ids) + 2)
    reused = generate(model, tok, ids, prefix_cache=prefix, **late)
    cold = generate(model, tok, ids, **late)
    assert reused.cached_tokens == 20 and reused.token_ids == cold.token_ids
    assert np.allclose(reused.logprobs, cold.logprobs, atol=1e-4)
    exact = generate(model, tok, ids, max_new_tokens=16, eos_token_ids=[])
    assert exact.logprobs != cold.logprobs  # the codes were used after the start

    at_once = generate(model, tok, ids, prefix_cache=prefix, **{**late, "quantized_kv_start": 0})
    caches = [model.quantize_cache(DenseKVCache(key_values=kv), 4, 32) for kv in state]
    steps = generate_step(model, ids[20:], caches, offset=20)
    want = [next(steps) for _ in range(16)]
    assert at_once.cached_tokens == 20 and at_once.token_ids == [t for t, _ in want]
    assert at_once.logprobs == [lp for _, lp in want]


@pytest.mark.kernels
def test_start_zero_never_reads_exact_kv_so_chunking_changes_nothing(tmp_path, qwen3_tokenizer_dir):
    """quantized_kv_start=0: the caches are quantized while empty, so every pass - the prompt's too - reads codes
    (fs checks before the first pass as well as after each; mlx-lm only after). A prompt fed in one pass or in
    chunks, or as decode steps, then gives the same bits on the batch-invariant kernels: the engine's contract."""
    from fs_generate import step
    from fs_weights import preset, write_random_checkpoint

    d = write_random_checkpoint(tmp_path / "bf16", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir)
    model, tok = load(str(d))
    ids = tok.encode(PROMPT)
    kw = dict(max_new_tokens=8, eos_token_ids=[], kv_bits=8, kv_group_size=32)
    whole = generate(model, tok, ids, **kw)
    from fs_generate.generate import Generator

    g = Generator(model, tok, ids, **kw)
    got = []
    for chunk in (5, 1):
        caches = model.make_cache()
        g.kv_bits(model, caches)
        assert all(type(c) is QuantizedKVCache for c in caches)  # quantized while empty
        steps = step.generate_step(model, ids, caches, chunk=chunk, after_pass=g.kv_bits)
        got.append([next(steps) for _ in range(8)])
    for run in got:
        assert [t for t, _ in run] == whole.token_ids and [lp for _, lp in run] == whole.logprobs
