"""A LoRA adapter on the fast kernels (`nox -s kernels`): the equality contracts still hold bit for bit - batch ==
one by one, a radix hit == a cold prefill, the engine == generate - on a bf16 base (adapted weights stay bf16)
and on a stored 4-bit base, where the adapted matrices run as bf16 beside the others' 4-bit codes."""

import numpy as np
import pytest

from fs_generate import Engine, generate, generate_batch, load
from fs_generate.generate import Generator
from fs_kvcache import RadixPrefixCache

PROMPTS = ["The capital of France is", "def fibonacci(n):", "你好", "A much longer prompt, with more tokens in it."]


@pytest.fixture(scope="module")
def adapted(tmp_path_factory, qwen3_tokenizer_dir):
    from fs_model import cpu
    from fs_weights import preset, write_random_checkpoint
    from fs_weights.random_adapter import write_random_adapter

    if not cpu.HAVE_NUMBA:  # the kernels session installs fs-model[fast]: there this must not skip
        pytest.skip("numba is not installed: the kept-weight kernels are tested by `nox -s kernels`")
    root, made = tmp_path_factory.mktemp("lora"), {}
    for name, q in (("bf16", None), ("int4", 4)):
        d = write_random_checkpoint(root / name, preset("tiny"), dtype="bfloat16", quantize=q, group_size=32,
                                    tokenizer=qwen3_tokenizer_dir)  # fmt: skip
        a = write_random_adapter(d, root / f"{name}-adapter", rank=8, num_layers=1)
        made[name] = (load(str(d), adapter_path=str(a)), load(str(d)))
    return made


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", ["bf16", "int4"])
def test_the_adapted_model_runs_the_kept_formats(adapted, fmt):
    from fs_model.cpu.affine import AffineLinear
    from fs_model.cpu.bf16 import Bf16Linear

    (model, tok), (plain, _) = adapted[fmt]
    last, first = model.blocks[-1].attn.wq, model.blocks[0].attn.wq
    assert isinstance(last, Bf16Linear) and isinstance(first, AffineLinear if fmt == "int4" else Bf16Linear)
    with_adapter = generate(model, tok, PROMPTS[0], max_new_tokens=8, eos_token_ids=[])
    assert with_adapter.token_ids != generate(plain, tok, PROMPTS[0], max_new_tokens=8, eos_token_ids=[]).token_ids


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", ["bf16", "int4"])
def test_batch_and_radix_hit_equal_one_by_one_bitwise(adapted, fmt):
    model, tok = adapted[fmt][0]
    solo = [generate(model, tok, p, max_new_tokens=10, eos_token_ids=[]) for p in PROMPTS]
    batch = generate_batch(model, tok, PROMPTS, max_new_tokens=10, eos_token_ids=[])
    assert [(b.token_ids, b.logprobs) for b in batch] == [(s.token_ids, s.logprobs) for s in solo]
    system = "You are a careful assistant. " * 8
    radix = RadixPrefixCache(("tiny-lora", fmt), block_size=16)
    list(Generator(model, tok, system + "One?", max_new_tokens=8, eos_token_ids=[], prefix_cache=radix).steps())
    hit = Generator(model, tok, system + "Two?", max_new_tokens=8, eos_token_ids=[], prefix_cache=radix)
    list(hit.steps())
    cold = generate(model, tok, system + "Two?", max_new_tokens=8, eos_token_ids=[])
    assert hit.reused > 0 and (hit.result.token_ids, hit.result.logprobs) == (cold.token_ids, cold.logprobs)


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", ["bf16", "int4"])
def test_the_engine_equals_generate_bitwise(adapted, fmt):
    model, tok = adapted[fmt][0]
    engine = Engine(model, tok, max_batch=4, block_size=8, max_step_tokens=16)
    rng = np.random.default_rng(2)
    prompts = [rng.integers(0, 1000, n).tolist() for n in (5, 19, 33, 12)]
    kws = [dict(max_new_tokens=12, eos_token_ids=[], temperature=0.8, seed=i) for i in range(4)]
    handles = [engine.submit(p, **kw) for p, kw in zip(prompts, kws, strict=True)]
    engine.run_until_idle()
    for h, p, kw in zip(handles, prompts, kws, strict=True):
        want = generate(model, tok, p, **kw)
        assert (h.result().token_ids, h.result().logprobs) == (want.token_ids, want.logprobs)
