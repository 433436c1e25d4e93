"""The engine's contract: a request's output never depends on what else runs (serving.md).

Random schedules (arrival steps, prompt lengths 1-300, shared prefixes, greedy and seeded sampling, stop strings,
cancellations, a block budget small enough to force preemption) on the fast kernels: every request's tokens,
text and finish reason equal its solo ``generate``, its log-probabilities bit for bit. A scheduler that feeds a
chunk twice, skips one, writes a token's K/V into a neighbour's block, recomputes a preempted request from the
wrong position, or reseeds its sampler fails these.
"""

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fs_generate import Engine, GenerateError, generate, load, stream_generate

V_USED = 5000  # prompt ids drawn below this: ordinary byte-level tokens of the real vocabulary


SOLO: dict = {}


def solo(model, tok, prompt, kw):
    key = (id(model), tuple(prompt), repr(sorted(kw.items())))
    if key not in SOLO:
        SOLO[key] = generate(model, tok, prompt, **kw)
    return SOLO[key]


def assert_no_leak(engine):
    s = engine.stats()
    assert s["kv_blocks_used"] == 0 and s["running"] == 0 and s["waiting"] == 0
    pool = engine.pool
    engine.prefix.clear()
    assert pool.free_blocks == pool.num_blocks and not any(pool.refs)
    assert sorted(pool._free) == list(range(pool.num_blocks))  # the free list is whole: no block twice, none lost


PIN = {"logit_bias": {9: 4.0}}  # OpenAI's additive adjustments (penalties.py) must keep batch == solo too
prefixes = st.sampled_from([[], list(range(100, 148)), list(range(200, 217))])
request = st.fixed_dictionaries(
    {
        "arrive": st.integers(0, 6),
        "prefix": prefixes,
        "own": st.lists(st.integers(0, V_USED), min_size=1, max_size=60),
        "max_new_tokens": st.integers(1, 24),
        "sampled": st.booleans(),
        "seed": st.integers(0, 3),
        "stop": st.sampled_from([(), ("e",), ("the", "a")]),
        "cancel_at": st.one_of(st.none(), st.none(), st.none(), st.integers(0, 12)),
        "penalties": st.sampled_from([{}, {}, {"frequency_penalty": 1.5, "presence_penalty": 0.5}, PIN]),
    }
)


@pytest.mark.kernels
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    reqs=st.lists(request, min_size=1, max_size=8),
    long_one=st.booleans(),
    block_size=st.sampled_from([4, 16]),
    spare=st.integers(0, 3),
    max_batch=st.integers(1, 6),
    step_tokens=st.sampled_from([8, 32, 512]),
)
def test_random_schedules_give_every_request_its_solo_output(
    fast, reqs, long_one, block_size, spare, max_batch, step_tokens
):
    model, tok = fast
    if long_one:  # one prompt near the upper length
        reqs[0] = {**reqs[0], "own": list(range(1000, 1000 + 300 - len(reqs[0]["prefix"])))}
    longest = max(len(r["prefix"]) + len(r["own"]) + r["max_new_tokens"] for r in reqs)
    blocks = -(-longest // block_size) + spare  # the longest fits alone; together they may not (preemption)
    engine = Engine(
        model,
        tok,
        max_batch=max_batch,
        max_step_tokens=step_tokens,
        block_size=block_size,
        kv_budget_bytes=blocks * model.kv_block_bytes(block_size),
    )
    handles, kws, at = {}, {}, 0
    while at <= 6 or engine.step():
        for i, r in enumerate(reqs):
            if r["arrive"] == at:
                kw = dict(max_new_tokens=r["max_new_tokens"], stop=r["stop"], eos_token_ids=[], **r["penalties"])
                if r["sampled"]:
                    kw.update(temperature=0.9, top_k=50, seed=r["seed"])
                kws[i] = kw
                handles[i] = engine.submit(r["prefix"] + r["own"], **kw)
            if r["cancel_at"] == at and i in handles:
                handles[i].cancel()
        if at <= 6:
            engine.step()
        at += 1
    for i, h in handles.items():
        got = h.result()
        want = solo(model, tok, reqs[i]["prefix"] + reqs[i]["own"], kws[i])
        if got.finish_reason == "cancelled":
            assert reqs[i]["cancel_at"] is not None
            assert got.token_ids == want.token_ids[: len(got.token_ids)]
            continue
        assert (got.token_ids, got.text, got.finish_reason) == (want.token_ids, want.text, want.finish_reason)
        assert got.logprobs == want.logprobs  # bit for bit
    event(f"preempted: {engine.stats()['preempted'] > 0}")
    event(f"cached tokens: {engine.stats()['cached_tokens'] > 0}")
    event(f"cancelled: {engine.stats()['cancelled'] > 0}")
    assert_no_leak(engine)


def test_a_shared_prefix_is_computed_once(fast):
    model, tok = fast
    engine = Engine(model, tok, block_size=16, kv_budget_bytes=64 * model.kv_block_bytes(16))
    system = list(range(300, 364))  # 4 full blocks
    first = engine.submit([*system, 7, 8, 9], max_new_tokens=2, eos_token_ids=[])
    first.result()
    parts = [[11], [12, 13, 14], list(range(20, 40))]
    hs = [engine.submit(system + p, max_new_tokens=3, eos_token_ids=[]) for p in parts]
    engine.run_until_idle()
    assert engine.stats()["prefill_tokens"] == len(system) + 3 + sum(len(p) for p in parts)
    assert [h.result().cached_tokens for h in hs] == [64, 64, 64]
    assert engine.stats()["cached_tokens"] == 3 * 64
    for h, p in zip(hs, parts, strict=True):
        assert h.result().token_ids == generate(model, tok, system + p, max_new_tokens=3, eos_token_ids=[]).token_ids


def test_nothing_leaks_after_hundreds_of_requests(fast):
    """Cancels (waiting, mid-prefill, mid-decode) and preemptions included: every block comes back. (400: a leak of
    one block per request in any path runs a 20-block pool dry within the first few dozen; 1,000 took 12 s.)"""
    model, tok = fast
    engine = Engine(
        model, tok, max_batch=8, max_step_tokens=24, block_size=4, kv_budget_bytes=20 * model.kv_block_bytes(4)
    )
    rng = np.random.default_rng(0)
    handles = []
    for n in range(400):
        prompt = rng.integers(0, V_USED, int(rng.integers(1, 30))).tolist()
        handles.append(engine.submit(prompt, max_new_tokens=int(rng.integers(1, 6)), eos_token_ids=[]))
        if rng.random() < 0.15:
            handles[int(rng.integers(0, len(handles)))].cancel()
        if n % 3 == 0:
            engine.step()
    engine.run_until_idle()
    s = engine.stats()
    assert s["finished"] + s["cancelled"] == 400 and s["failed"] == 0
    assert s["preempted"] > 0 and s["cancelled"] > 0
    assert all(h.done for h in handles)
    assert_no_leak(engine)


def test_cancel_frees_a_request_at_any_point(fast):
    model, tok = fast
    engine = Engine(model, tok, max_step_tokens=8, kv_budget_bytes=32 * model.kv_block_bytes(16))
    waiting = engine.submit(list(range(100, 130)), max_new_tokens=5)
    waiting.cancel()
    mid_prefill = engine.submit(list(range(100, 130)), max_new_tokens=5)
    engine.step()  # 8 of its 30 prompt tokens
    mid_prefill.cancel()
    mid_prefill.cancel()  # idempotent
    decoding = engine.submit([5, 6, 7], max_new_tokens=50, eos_token_ids=[])
    for _ in range(4):
        engine.step()
    decoding.cancel()
    engine.run_until_idle()
    for h in (waiting, mid_prefill):
        assert (h.result().finish_reason, h.result().token_ids) == ("cancelled", [])
    got = decoding.result()
    assert got.finish_reason == "cancelled" and 1 <= len(got.token_ids) < 50
    assert (
        got.token_ids
        == generate(model, tok, [5, 6, 7], max_new_tokens=50, eos_token_ids=[]).token_ids[: len(got.token_ids)]
    )
    decoding.cancel()  # harmless once finished
    assert_no_leak(engine)


def test_a_background_engine_serves_many_threads_and_streams(fast):
    model, tok = fast
    engine = Engine(model, tok, max_batch=4)
    engine.start()
    prompts = ["The capital of France is", "def fibonacci(n):", "你好，世界", "Once upon a time"] * 2
    out: dict[int, object] = {}

    def client(i):
        h = engine.submit(prompts[i], max_new_tokens=8, seed=i, temperature=0.7)
        out[i] = (list(h.stream()), h.result(timeout=60))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    engine.stop()
    for i, p in enumerate(prompts):
        steps, res = out[i]
        want = list(stream_generate(model, tok, p, max_new_tokens=8, seed=i, temperature=0.7))
        assert steps == want
        assert "".join(s.text for s in steps) == res.text
    late = engine.submit("late", max_new_tokens=3)  # stopped: result() steps the engine itself
    assert len(late.result().token_ids) + (late.result().finish_reason == "eos") >= 1
    assert [s.token_id for s in late.stream()][: len(late.result().token_ids)] == late.result().token_ids


def test_float32_weights_agree_to_rounding(tmp_path, qwen3_tokenizer_dir):
    """BLAS sums depend on the batch: on float32 weights tokens match and log-probs agree to float32 rounding."""
    from fs_weights import preset, write_random_checkpoint

    d = write_random_checkpoint(tmp_path / "f32", preset("tiny"), dtype="float32", tokenizer=qwen3_tokenizer_dir)
    model, tok = load(str(d), dtype="float32")
    engine = Engine(model, tok, max_batch=3, max_step_tokens=16, kv_budget_bytes=40 * model.kv_block_bytes(16))
    prompts = ["The capital of France is", "def fibonacci(n):" * 6, "你好"]
    hs = [engine.submit(p, max_new_tokens=6, eos_token_ids=[]) for p in prompts]
    engine.run_until_idle()
    for h, p in zip(hs, prompts, strict=True):
        want = generate(model, tok, p, max_new_tokens=6, eos_token_ids=[])
        assert h.result().token_ids == want.token_ids
        assert np.allclose(h.result().logprobs, want.logprobs, rtol=1e-4, atol=1e-4)


def test_bad_input_is_refused_clearly(fast):
    model, tok = fast
    with pytest.raises(GenerateError, match="max_batch must be a positive int"):
        Engine(model, tok, max_batch=0)
    with pytest.raises(GenerateError, match="holds no block"):
        Engine(model, tok, kv_budget_bytes=10)
    with pytest.raises(GenerateError, match="no paged forward pass"):
        Engine(object(), tok)
    engine = Engine(model, tok, kv_budget_bytes=2 * model.kv_block_bytes(16))
    with pytest.raises(GenerateError, match="temperature"):
        engine.submit("hi", max_new_tokens=3, temperature=-1)
    with pytest.raises(GenerateError, match="empty prompt"):
        engine.submit([], max_new_tokens=3)
    too_long = engine.submit(list(range(40)), max_new_tokens=3)  # 3 blocks; the pool has 2
    ok = engine.submit([1, 2, 3], max_new_tokens=2, eos_token_ids=[])
    with pytest.raises(GenerateError, match="needs 3 KV blocks of 16 positions but the pool has 2"):
        too_long.result()
    assert len(ok.result().token_ids) == 2  # the refusal did not stop the engine
    assert engine.submit("x", max_new_tokens=0).result().finish_reason == "length"


@pytest.fixture(scope="module")
def formats(fast):
    """The same bf16 checkpoint in every kept-weight format the fast kernels run."""
    path = fast[0].path
    return {"bf16": fast, "int8": load(path, quantize="int8"), "int4": load(path, quantize="int4")}


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", ["bf16", "int8", "int4"])
def test_preempted_requests_recompute_to_the_same_output(formats, fmt):
    """A pool that holds two of these sequences at their full length: the newest is preempted again and again."""
    model, tok = formats[fmt]
    engine = Engine(model, tok, max_batch=6, block_size=4, kv_budget_bytes=25 * model.kv_block_bytes(4))
    rng = np.random.default_rng(4)
    prompts = [rng.integers(0, V_USED, 20).tolist() for _ in range(6)]
    kws = [
        dict(max_new_tokens=30, eos_token_ids=[], temperature=0.8, seed=i)
        if i % 2
        else dict(max_new_tokens=30, eos_token_ids=[])
        for i in range(6)
    ]
    hs = [engine.submit(p, **kw) for p, kw in zip(prompts, kws, strict=True)]
    engine.run_until_idle()
    assert engine.stats()["preempted"] >= 3
    for h, p, kw in zip(hs, prompts, kws, strict=True):
        want = generate(model, tok, p, **kw)
        assert (h.result().token_ids, h.result().logprobs) == (want.token_ids, want.logprobs)
    assert_no_leak(engine)


@pytest.mark.parity
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_mlx_backend_runs_the_same_engine(tmp_path, qwen3_tokenizer_dir, reference, dtype):
    """MLX (CPU here, Metal under `nox -s metal`): K/V in MLX arrays in the same block pool, each sequence's history
    gathered from its blocks; prefill chunks beside decodes, a shared prefix and preemption, equal to generate."""
    reference("mlx.core")
    from fs_weights import preset, write_random_checkpoint

    d = write_random_checkpoint(tmp_path / dtype, preset("tiny"), dtype=dtype, tokenizer=qwen3_tokenizer_dir)
    model, tok = load(str(d), backend="mlx")
    engine = Engine(
        model, tok, max_batch=4, max_step_tokens=16, block_size=8, kv_budget_bytes=12 * model.kv_block_bytes(8)
    )
    system = "You are a careful assistant. " * 6
    prompts = [system + "Question one?", "def fibonacci(n):", system + "Question two?", "你好" * 12]
    kws = [
        dict(max_new_tokens=20, eos_token_ids=[]),
        dict(max_new_tokens=20, eos_token_ids=[], temperature=0.8, seed=2),
    ] * 2
    hs = [engine.submit(p, **kw) for p, kw in zip(prompts, kws, strict=True)]
    engine.run_until_idle()
    s = engine.stats()
    assert s["preempted"] > 0 and s["kv_blocks_used"] == 0
    for h, p, kw in zip(hs, prompts, kws, strict=True):
        want = generate(model, tok, p, **kw)
        assert h.result().token_ids == want.token_ids
        assert np.allclose(h.result().logprobs, want.logprobs, atol=1e-5 if dtype == "float32" else 1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [{}, {"quantize": "int8"}, {"quantize": "int4"}], ids=["bf16", "int8", "int4"])
def test_the_engine_equals_generate_at_qwen3_06b_shapes(tmp_path_factory, qwen3_tokenizer_dir, fmt):
    """Real block shapes (28 layers, 16/8 heads of 128, 1024 hidden): a shared 48-token prefix, prefill chunks of 32
    beside decodes, a pool small enough to preempt; every request bit for bit its solo generate."""
    from fs_model import cpu
    from fs_weights import preset, write_random_checkpoint

    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: `nox -s slow` installs every extra")
    d = tmp_path_factory.getbasetemp() / "engine-qwen3-0.6b-bf16"
    if not d.exists():
        write_random_checkpoint(d, preset("qwen3-0.6b"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir, seed=2)
    model, tok = load(str(d), **fmt)
    engine = Engine(model, tok, max_batch=3, max_step_tokens=32, kv_budget_bytes=9 * model.kv_block_bytes(16))
    rng = np.random.default_rng(1)
    shared = rng.integers(0, V_USED, 48).tolist()
    prompts = [shared + rng.integers(0, V_USED, n).tolist() for n in (5, 30, 17)]
    kws = [
        dict(max_new_tokens=24, eos_token_ids=[]),
        dict(max_new_tokens=24, eos_token_ids=[], temperature=0.7, seed=1),
    ]
    hs = [engine.submit(p, **kws[i % 2]) for i, p in enumerate(prompts)]
    engine.run_until_idle()
    assert engine.stats()["preempted"] > 0
    for i, (h, p) in enumerate(zip(hs, prompts, strict=True)):
        want = generate(model, tok, p, **kws[i % 2])
        assert (h.result().token_ids, h.result().logprobs) == (want.token_ids, want.logprobs)


def test_sequences_decoding_together_grow_into_adjacent_blocks(tiny_dir):
    """The scheduler hands its tables the attention tile's run (scheduler.RUN_POSITIONS / block size): three requests
    decoding side by side each hold one run of adjacent blocks, not every third block of the pool (where fs-model's
    attention would read each 16-key block as its own tile)."""
    from fs_generate.scheduler import RUN_POSITIONS
    from fs_model.cpu.attention_calls import TILE

    assert RUN_POSITIONS == TILE  # the run is the tile: one decision, written in two layers
    model, tok = load(tiny_dir)
    engine = Engine(model, tok, max_batch=3, block_size=16, kv_budget_bytes=64 * model.kv_block_bytes(16))
    assert engine.scheduler.run == RUN_POSITIONS // 16 == 4
    hs = [engine.submit(list(range(10 + i, 15 + i)), max_new_tokens=60, eos_token_ids=[]) for i in range(3)]
    while min(len(h._steps) for h in hs) < 58:
        engine.step()
    tables = [r.table.blocks for r in engine.scheduler.running]
    assert len(tables) == 3 and all(len(t) == 4 for t in tables)
    assert all(t == list(range(t[0], t[0] + 4)) for t in tables), tables
    engine.run_until_idle()
    assert_no_leak(engine)


def test_the_worked_example_of_docs_engine_md(fast):
    model, tok = fast
    engine = Engine(model, tok, max_step_tokens=8, block_size=4, kv_budget_bytes=16 * model.kv_block_bytes(4))
    a_prompt = list(range(500, 510))
    a = engine.submit(a_prompt, max_new_tokens=3, eos_token_ids=[])
    engine.step()
    assert engine.stats()["prefill_tokens"] == 8 and engine.stats()["kv_blocks_used"] == 3
    b = engine.submit([*a_prompt[:8], 1, 2, 3], max_new_tokens=3, eos_token_ids=[])
    engine.step()
    s = engine.stats()
    assert (s["prefill_tokens"], s["cached_tokens"], s["kv_blocks_used"]) == (13, 8, 4)
    assert [len(h._steps) for h in (a, b)] == [1, 1]  # each has its first token
    engine.run_until_idle()
    assert engine.stats()["kv_blocks_used"] == 0 and engine.stats()["kv_blocks_cached"] > 0
    assert b.result().cached_tokens == 8


@pytest.mark.parity
def test_the_mlx_engine_runs_in_its_background_thread(tmp_path, qwen3_tokenizer_dir, reference):
    """MLX evaluates a lazy array only on the thread that made it: the K/V pool is made on the caller's thread and
    the steps run on Engine.start's (fs-serve's case). This failed with "There is no Stream(cpu, 0)"."""
    reference("mlx.core")
    from fs_weights import preset, write_random_checkpoint

    d = write_random_checkpoint(tmp_path / "m", preset("tiny"), dtype="float32", tokenizer=qwen3_tokenizer_dir)
    model, tok = load(str(d), backend="mlx")
    engine = Engine(model, tok, max_batch=2, kv_budget_bytes=8 * model.kv_block_bytes(16))
    engine.start()
    try:
        got = engine.submit("Hello there", max_new_tokens=6, eos_token_ids=[]).result(timeout=60)
    finally:
        engine.stop()
    assert got.token_ids == generate(model, tok, "Hello there", max_new_tokens=6, eos_token_ids=[]).token_ids
