"""Qwen3-MoE under the equality contracts, on the kept-weight kernels (bf16, int8, int4; `nox -s kernels`): batch ==
one by one and the continuous-batching Engine == ``generate``, bit for bit down to every log-probability - a
token's experts and their summation order must not depend on the other sequences in the step."""

import numpy as np
import pytest

from fs_generate import Engine, generate, generate_batch, load

FORMATS = {"bf16": {"dtype": "native"}, "int8": {"quantize": "int8"}, "int4": {"quantize": "int4"}}
PROMPTS = ["The capital of France is", "def fibonacci(n):", "你好", "A much longer prompt, with more tokens in it."]
MOE = dict(model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
           norm_topk_prob=True, mlp_only_layers=[1])  # fmt: skip


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory, qwen3_tokenizer_dir):
    from fs_model import cpu
    from fs_weights import preset, write_random_checkpoint

    if not cpu.HAVE_NUMBA:  # the kernels session installs fs-model[fast]: there this must not skip
        pytest.skip("numba is not installed: the kept-weight kernels are tested by `nox -s kernels`")
    root = tmp_path_factory.mktemp("moe")
    return write_random_checkpoint(
        root / "bf16", preset("tiny", **MOE), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir
    )


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_batch_equals_one_by_one_bitwise(moe_dir, fmt):
    model, tok = load(str(moe_dir), **FORMATS[fmt])
    solo = [generate(model, tok, p, max_new_tokens=8, eos_token_ids=[]) for p in PROMPTS]
    batch = generate_batch(model, tok, PROMPTS, max_new_tokens=8, eos_token_ids=[])
    assert [b.token_ids for b in batch] == [s.token_ids for s in solo]
    assert [b.logprobs for b in batch] == [s.logprobs for s in solo]


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
