"""top_logprobs (what a server's ``logprobs`` reports) and the handle's non-blocking side (what an event loop uses):
the same on generate and the engine, and right against a float64 log-softmax."""

import threading

import numpy as np
import pytest

from fs_generate import Engine, GenerateError, generate, stream_generate
from fs_generate.sampling import top_logprobs


def test_top_logprobs_is_the_log_softmax_top_k_in_a_stable_order():
    z = np.array([1.0, 3.0, 3.0, -2.0, 0.5], np.float32)
    ref = z.astype(np.float64) - np.log(np.exp(z.astype(np.float64)).sum())
    got = top_logprobs(z, 3)
    assert [i for i, _ in got] == [1, 2, 0]  # equal logits in id order
    np.testing.assert_allclose([lp for _, lp in got], ref[[1, 2, 0]], rtol=1e-12)


def test_generate_and_the_engine_report_the_same_top_logprobs(tiny_dir):
    from fs_generate import load

    model, tok = load(str(tiny_dir))
    steps = list(stream_generate(model, tok, "Hello there", max_new_tokens=6, top_logprobs=4))
    for s in steps:
        assert len(s.top_logprobs) == 4
        assert s.top_logprobs[0] == (s.token_id, pytest.approx(s.logprob))  # greedy picks the likeliest
        lps = [lp for _, lp in s.top_logprobs]
        assert lps == sorted(lps, reverse=True)
    engine = Engine(model, tok, max_batch=2, kv_budget_bytes=4 << 20)
    h = engine.submit("Hello there", max_new_tokens=6, top_logprobs=4)
    other = engine.submit("Something else entirely", max_new_tokens=9, temperature=1.0, seed=1)
    engine.run_until_idle()
    # float32 on the BLAS path: the same tokens, log-probabilities to rounding (bitwise on the fast kernels)
    for a, b in zip(h.stream(), steps, strict=True):
        assert [i for i, _ in a.top_logprobs] == [i for i, _ in b.top_logprobs]
        np.testing.assert_allclose([lp for _, lp in a.top_logprobs], [lp for _, lp in b.top_logprobs], rtol=1e-5)
    assert other.result().finish_reason == "length"
    assert all(s.top_logprobs == () for s in other.stream())  # not asked for, not computed
    with pytest.raises(GenerateError, match="top_logprobs"):
        generate(model, tok, "x", max_new_tokens=1, top_logprobs=21)


def test_subscribe_and_poll_see_every_step_without_blocking(tiny_dir):
    from fs_generate import load

    model, tok = load(str(tiny_dir))
    engine = Engine(model, tok, max_batch=2, kv_budget_bytes=4 << 20)
    engine.start()
    try:
        h = engine.submit("Count with me", max_new_tokens=8)
        woke = threading.Semaphore(0)
        h.subscribe(woke.release)
        seen, done = [], False
        while not done:
            assert woke.acquire(timeout=30)
            steps, done = h.poll(len(seen))
            seen += steps
        assert [s.token_id for s in seen] == [s.token_id for s in h.stream()]
        assert h.result().token_ids == [s.token_id for s in seen if s.finish_reason != "eos"]
        late = threading.Event()
        h.subscribe(late.set)  # subscribing to a finished request calls back at once
        assert late.is_set()

        def broken() -> None:
            raise RuntimeError("a subscriber's bug")

        h2 = engine.submit("Count with me", max_new_tokens=8)
        h2.subscribe(broken)  # logged, and the request (and the engine) carry on
        assert h2.result(timeout=60).token_ids == h.result().token_ids
    finally:
        engine.stop()


def test_top_logprobs_equals_a_full_stable_sort_on_tied_vocabularies():
    rng = np.random.default_rng(0)
    for _ in range(50):
        z = rng.integers(-3, 3, 2000).astype(np.float32)  # many ties, at the cut too
        k = int(rng.integers(1, 21))
        full = np.argsort(-z.astype(np.float64), kind="stable")[:k]
        assert [i for i, _ in top_logprobs(z, k)] == full.tolist()
