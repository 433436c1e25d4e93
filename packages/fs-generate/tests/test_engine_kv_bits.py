"""``Engine(kv_bits=...)``: the block pool keeps K/V as affine codes from the first position, written before any
pass reads them. Every request still equals its solo ``generate(kv_bits=...)`` (quantized_kv_start 0: fs quantizes
the empty cache, so no pass reads exact K/V there either) bit for bit - beside other requests, in prefill chunks,
from a prefix-cache hit, after preemption - on every kept-weight format the fast kernels run, and on MLX. A pool
that wrote exact K/V first, read a neighbour's codes, reused codes another group size made, or copied only the
codes of a block on write would fail these.
"""

import numpy as np
import pytest

from fs_generate import Engine, GenerateError, generate, load

V_USED = 5000


def run(model, tok, bits, group, prompts, kws, **engine_kw):
    engine = Engine(model, tok, kv_bits=bits, kv_group_size=group, **engine_kw)
    hs = [engine.submit(p, **kw) for p, kw in zip(prompts, kws, strict=True)]
    engine.run_until_idle()
    return engine, [h.result() for h in hs]


def schedule(seed):
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, V_USED, 24).tolist()  # a prefix the later requests hit in the prefix cache
    prompts = [shared + rng.integers(0, V_USED, n).tolist() for n in (9, 3, 17, 6)] + [[7] * 5]
    kws = [
        dict(max_new_tokens=14, eos_token_ids=[]),
        dict(max_new_tokens=14, eos_token_ids=[], temperature=0.8, top_k=40, seed=3),
        dict(max_new_tokens=14, eos_token_ids=[], frequency_penalty=1.0),
        dict(max_new_tokens=14, eos_token_ids=[], temperature=0.7, seed=5),
        dict(max_new_tokens=14, eos_token_ids=[]),
    ]
    return prompts, kws


@pytest.fixture(scope="module")
def formats(tmp_path_factory, qwen3_tokenizer_dir):
    from fs_model import cpu
    from fs_weights import preset, write_random_checkpoint

    if not cpu.HAVE_NUMBA:  # the kernels session installs fs-model[fast]: there this must not skip
        pytest.skip("numba is not installed: the bitwise contracts on the kernels are tested by `nox -s kernels`")
    d = write_random_checkpoint(
        tmp_path_factory.mktemp("kvbits") / "bf16", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir
    )
    return {"bf16": load(str(d)), "int8": load(str(d), quantize="int8"), "int4": load(str(d), quantize="int4")}


@pytest.mark.kernels
@pytest.mark.parametrize(("fmt", "bits"), [("bf16", 8), ("bf16", 4), ("int8", 8), ("int4", 4)])
def test_every_request_equals_its_solo_generate_with_the_same_kv_bits(formats, fmt, bits):
    model, tok = formats[fmt]
    prompts, kws = schedule(bits)
    budget = 20 * model.kv_block_bytes(4, bits, 32)  # about two of these at full length: preemption
    engine, got = run(model, tok, bits, 32, prompts, kws, max_batch=4, max_step_tokens=12, block_size=4,
                      kv_budget_bytes=budget)  # fmt: skip
    s = engine.stats()
    assert s["kv_bits"] == bits and s["cached_tokens"] > 0 and s["preempted"] > 0
    for g, p, kw in zip(got, prompts, kws, strict=True):
        want = generate(model, tok, p, kv_bits=bits, kv_group_size=32, **kw)
        assert (g.token_ids, g.logprobs) == (want.token_ids, want.logprobs)
    exact = generate(model, tok, prompts[0], **kws[0])
    assert exact.logprobs != got[0].logprobs  # the codes were read


def test_codes_hold_more_positions_in_the_same_bytes_and_bad_settings_are_refused(tiny_dir):
    """Bits a cached value takes: float32 K/V 32; 8-bit codes in groups of 32 with a float32 scale and bias each
    8 + 64/32 = 10, 4-bit 6. So the same budget holds 3.2× the blocks at 8 bits and 5.3× at 4 (Qwen3-0.6B's bf16
    pool, group 64: 16 against 9 and 5 bits, 1.8× and 3.2×)."""
    model, tok = load(str(tiny_dir))
    budget = 64 * model.kv_block_bytes(16)
    blocks = {b: Engine(model, tok, kv_bits=b, kv_group_size=32, kv_budget_bytes=budget).pool.num_blocks
              for b in (8, 4)}  # fmt: skip
    assert blocks == {8: 64 * 32 // 10, 4: 64 * 32 // 6}
    assert model.kv_block_bytes(16, 8, 32) == Engine(model, tok, kv_bits=8, kv_group_size=32,
                                                     kv_budget_bytes=budget).store.nbytes // blocks[8]  # fmt: skip
    worked = Engine(model, tok, kv_bits=4, kv_group_size=32, block_size=4, kv_budget_bytes=budget)  # docs/engine.md
    slots = worked.pool.num_blocks * 4
    assert [a.shape for a in worked.store.k[0]] == [(2, slots, 4), (2, slots, 1), (2, slots, 1)]
    with pytest.raises(GenerateError, match="kv_bits must be one of"):
        Engine(model, tok, kv_bits=3)
    with pytest.raises(GenerateError, match="does not divide this model's head_dim 32"):
        Engine(model, tok, kv_bits=8, kv_group_size=64)


@pytest.mark.parity
def test_the_mlx_engine_keeps_mx_quantize_codes(tmp_path, qwen3_tokenizer_dir, reference):
    """MLX: the pool holds ``mx.quantize``'s triples and attention runs as ``mx.quantized_matmul`` (as mlx-lm's
    quantized attention); a shared prefix, chunks and preemption, each request its solo generate bit for bit."""
    reference("mlx.core")
    from fs_weights import preset, write_random_checkpoint

    d = write_random_checkpoint(tmp_path / "bf16", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir)
    model, tok = load(str(d), backend="mlx")
    prompts, kws = schedule(1)
    budget = 20 * model.kv_block_bytes(4, 4, 32)
    engine, got = run(model, tok, 4, 32, prompts, kws, max_batch=4, max_step_tokens=12, block_size=4,
                      kv_budget_bytes=budget)  # fmt: skip
    assert engine.stats()["cached_tokens"] > 0 and engine.stats()["preempted"] > 0
    for g, p, kw in zip(got, prompts, kws, strict=True):
        want = generate(model, tok, p, kv_bits=4, kv_group_size=32, **kw)
        assert (g.token_ids, g.logprobs) == (want.token_ids, want.logprobs)
