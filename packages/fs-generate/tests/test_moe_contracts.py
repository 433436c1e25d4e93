"""Qwen3-MoE under the Engine's equality contract, on the kept-weight kernels (bf16, int8, int4; `nox -s kernels`):
the continuous-batching Engine == ``generate``, bit for bit down to every log-probability - a token's experts and
their summation order must not depend on the other sequences in the step (the Engine batches
the sequences of every step, so this is batch == one by one as well)."""

import json

import numpy as np
import pytest

from fs_generate import Engine, generate, load

FORMATS = {"bf16": {"dtype": "native"}, "int8": {"quantize": "int8"}, "int4": {"quantize": "int4"}}


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_the_engine_equals_generate_bitwise(moe_dir, fmt):
    """Staggered arrivals, prefill chunks beside decodes, sampled and greedy requests in one pool."""
    model, tok = load(str(moe_dir), **FORMATS[fmt])
    engine = Engine(model, tok, max_batch=4, block_size=4, max_step_tokens=12)
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, 150000, n).tolist() for n in (5, 19, 11, 3, 27)]
    kws = [dict(max_new_tokens=10, eos_token_ids=[], temperature=0.7, seed=i) if i % 2 else
           dict(max_new_tokens=10, eos_token_ids=[]) for i in range(len(prompts))]  # fmt: skip
    handles = []
    for p, kw in zip(prompts, kws, strict=True):
        handles.append(engine.submit(p, **kw))
        engine.step()
    engine.run_until_idle()
    for h, p, kw in zip(handles, prompts, kws, strict=True):
        want = generate(model, tok, p, **kw)
        assert (h.result().token_ids, h.result().logprobs) == (want.token_ids, want.logprobs)


@pytest.mark.parity
def test_the_mlx_backend_runs_moe_in_the_engine(moe_dir, reference):
    """Stacked experts under the paged step: every request's tokens equal its solo generate (float32 rounding)."""
    reference("mlx.core")
    model, tok = load(str(moe_dir), backend="mlx", dtype="float32")
    engine = Engine(model, tok, max_batch=4, block_size=4, max_step_tokens=12)
    prompts = ["The capital of France is", "def fibonacci(n):", "你好" * 6]
    hs = [engine.submit(p, max_new_tokens=10, eos_token_ids=[]) for p in prompts]
    engine.run_until_idle()
    for h, p in zip(hs, prompts, strict=True):
        want = generate(model, tok, p, max_new_tokens=10, eos_token_ids=[])
        assert h.result().token_ids == want.token_ids
        assert np.allclose(h.result().logprobs, want.logprobs, atol=1e-5)


@pytest.mark.kernels
def test_cached_prefixes_equal_cold_prefills(moe_dir, tmp_path, capsys):
    """The Engine's prefix cache and a prompt-cache file (fs-cache-prompt) on a sparse model: a continuation from
    cached K/V equals generating from the joined ids cold, bit for bit (bf16 on the grouped expert kernel)."""
    from fs_generate.cache_prompt import main as cache_main
    from fs_generate.cli import main as generate_main

    model, tok = load(str(moe_dir))
    shared = np.random.default_rng(5).integers(0, 150000, 24).tolist()
    engine = Engine(model, tok, max_batch=2, block_size=4)
    first = engine.submit([*shared, 11, 12], max_new_tokens=4, eos_token_ids=[])
    engine.run_until_idle()
    hit = engine.submit([*shared, 13], max_new_tokens=8, eos_token_ids=[])
    engine.run_until_idle()
    assert first.result().cached_tokens == 0 and hit.result().cached_tokens == 24
    want = generate(model, tok, [*shared, 13], max_new_tokens=8, eos_token_ids=[])
    assert (hit.result().token_ids, hit.result().logprobs) == (want.token_ids, want.logprobs)
    f = tmp_path / "prefix.safetensors"
    assert cache_main(["--model", str(moe_dir), "-p", "def fibonacci(n):", "--raw", "--out", str(f)]) == 0
    assert generate_main(["--model", str(moe_dir), "--prompt-cache-file", str(f), "-p", "\n    ", "--raw", "-m", "6",
                          "--json"]) == 0  # fmt: skip
    got = json.loads(capsys.readouterr().out)
    ids = tok.encode("def fibonacci(n):") + tok.encode("\n    ")
    assert got["token_ids"] == generate(model, tok, ids, max_new_tokens=6).token_ids
