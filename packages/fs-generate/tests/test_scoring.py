"""Scoring a text (scoring.py): every token's log-probability given the ones before it - what ``echo`` with
``logprobs`` and ``fs-perplexity`` report. Proven against the model's uncached full forward pass and against the
logprobs ``generate`` reports for the tokens it chose."""

import numpy as np
import pytest

from fs_generate import Engine, GenerateError, generate, load
from fs_generate.scoring import log_softmax, score


@pytest.fixture(scope="module")
def loaded(tiny_dir):
    return load(str(tiny_dir))


def full_forward(model, ids):
    """The oracle: one uncached pass over the whole row, every position's logits."""
    logits = np.asarray(model.to_numpy(model(model.tokens_array([ids]), 0, None)), np.float32)[0]
    lp = log_softmax(logits)
    return [None] + [float(lp[i, ids[i + 1]]) for i in range(len(ids) - 1)]


def test_every_token_scored_as_the_full_forward_pass_scores_it_across_chunks(loaded):
    model, tok = loaded
    ids = tok.encode("The quick brown fox jumps over the lazy dog, and then it naps in the sun.")
    want = full_forward(model, ids)
    for chunk in (1, 3, 64):
        got = score(model, [ids], chunk=chunk)[0]
        assert got.token_ids == ids and got.logprobs[0] is None and len(got.logprobs) == len(ids)
        np.testing.assert_allclose(got.logprobs[1:], want[1:], rtol=1e-5, atol=1e-5)  # float32 weights


def test_the_tokens_generate_chose_score_as_generate_reported_them(loaded):
    model, tok = loaded
    prompt = tok.encode("Once upon a time")
    g = generate(model, tok, prompt, max_new_tokens=8, eos_token_ids=[])
    s = score(model, [prompt + g.token_ids])[0]
    np.testing.assert_allclose(s.logprobs[len(prompt) :], g.logprobs, rtol=1e-5, atol=1e-5)


def test_rows_scored_together_equal_each_alone_and_top_logprobs_rank_them(loaded):
    model, tok = loaded
    a, b = tok.encode("def fibonacci(n):"), tok.encode("你好，世界！今天")
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    both = score(model, [a, b], top_logprobs=3)
    for row, s in zip([a, b], both, strict=True):
        alone = score(model, [row], top_logprobs=3)[0]
        np.testing.assert_allclose(s.logprobs[1:], alone.logprobs[1:], rtol=1e-5, atol=1e-5)
        assert s.top_logprobs[0] == () and len(s.top_logprobs) == n
        for tok_id, tops, lp in zip(row[1:], s.top_logprobs[1:], s.logprobs[1:], strict=True):
            assert len(tops) == 3 and tops[0][1] >= tops[1][1] >= tops[2][1] and lp <= tops[0][1]
            assert dict(tops).get(tok_id, lp) == lp  # a listed token carries the very logprob it was scored


def test_the_engine_scores_in_its_own_thread(loaded):
    model, tok = loaded
    ids = tok.encode("A short text to score.")
    engine = Engine(model, tok, max_batch=2, kv_budget_bytes=64 * model.kv_block_bytes(16))
    assert engine.score([ids]).result()[0].logprobs == score(model, [ids])[0].logprobs  # inline when not started
    engine.start()
    try:
        h = engine.submit("meanwhile", max_new_tokens=4)
        assert engine.score([ids], top_logprobs=2).result(timeout=60)[0].logprobs == score(model, [ids])[0].logprobs
        h.result()
    finally:
        engine.stop()


@pytest.mark.parametrize(
    "rows,top,words",
    [
        ([], 0, "at least one non-empty row"),
        ([[1, 2], [3]], 0, "the same length"),
        ([[1, 10**7]], 0, "row 0: token id 10000000 at position 1 is out of range"),
        ([[1, 2]], 21, "top_logprobs must be an int in \\[0, 20\\]"),
    ],
)
def test_bad_rows_are_refused_before_any_work(loaded, rows, top, words):
    model, tok = loaded
    engine = Engine(model, tok, max_batch=1, kv_budget_bytes=8 * model.kv_block_bytes(16))
    for call in (lambda: score(model, rows, top), lambda: engine.score(rows, top)):
        with pytest.raises(GenerateError, match=words):
            call()
