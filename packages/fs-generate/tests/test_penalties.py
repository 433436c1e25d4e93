"""OpenAI's logit_bias, presence_penalty and frequency_penalty (penalties.py): the documented formula, checked
against mlx-lm's logits processors, and what a user sees through ``generate``."""

import numpy as np
import pytest

from fs_generate import GenerateError, generate, load
from fs_generate.penalties import Penalties


@pytest.fixture(scope="module")
def loaded(tiny_dir):
    return load(str(tiny_dir))


def test_the_formula_counts_generated_tokens_only():
    z = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
    p = Penalties.make(5, presence_penalty=0.5, frequency_penalty=0.25, logit_bias={0: 10.0, 4: -100.0})
    out = p.apply(z, [1, 1, 1, 2])  # token 1 three times, token 2 once, 3 never
    np.testing.assert_array_equal(out, [11.0, 2.0 - 0.5 - 0.75, 3.0 - 0.5 - 0.25, 4.0, -95.0])
    assert z.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]  # the caller's logits are untouched
    assert Penalties.make(5).apply(z, [1, 2]) is z  # nothing asked: no copy, no change


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"presence_penalty": 2.5}, "presence_penalty must be a number in \\[-2, 2\\]"),
        ({"frequency_penalty": float("nan")}, "frequency_penalty must be a number"),
        ({"logit_bias": {5: 1.0}}, "token id 5 is not in the vocabulary \\[0, 5\\)"),
        ({"logit_bias": {"1": 1.0}}, "token id '1' is not in the vocabulary"),
        ({"logit_bias": {1: 101}}, "token 1's bias must be a number in \\[-100, 100\\]"),
        ({"logit_bias": {1: float("inf")}}, "token 1's bias"),
    ],
)
def test_bad_values_are_refused_by_name(kw, words):
    with pytest.raises(GenerateError, match=words):
        Penalties.make(5, **kw)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mlx_lm_processors_agree(seed):
    """mlx-lm's logit_bias / presence / frequency processors, given only the generated tokens and a window as long
    as they are, compute the same logits (float32 rounding: one add per term either way)."""
    mx = pytest.importorskip("mlx.core", reason="mlx is in the parity group: uv sync --group parity")
    from mlx_lm.sample_utils import make_logits_processors

    rng = np.random.default_rng(seed)
    V = 300
    z = rng.normal(size=V).astype(np.float32) * 4
    generated = rng.integers(0, 40, size=60).tolist()  # repeats, so counts > 1
    bias = {int(t): float(b) for t, b in zip(rng.choice(V, 7, replace=False), rng.uniform(-100, 100, 7), strict=True)}
    ours = Penalties.make(V, presence_penalty=0.7, frequency_penalty=-0.3, logit_bias=bias).apply(z, generated)
    theirs = mx.array(z)[None]
    procs = make_logits_processors(bias, None, None, 0.7, len(generated), -0.3, len(generated))
    for proc in procs:
        theirs = proc(mx.array(generated), theirs)
    np.testing.assert_allclose(ours, np.array(theirs[0]), rtol=1e-6, atol=1e-5)


test_mlx_lm_processors_agree = pytest.mark.parity(test_mlx_lm_processors_agree)


def test_a_bias_forces_and_bans_tokens_and_logprobs_stay_raw(loaded):
    model, tok = loaded
    plain = generate(model, tok, "The sea", max_new_tokens=4)
    forced = generate(model, tok, "The sea", max_new_tokens=4, logit_bias={220: 100.0})
    assert forced.token_ids == [220] * 4
    banned = generate(model, tok, "The sea", max_new_tokens=4, logit_bias={plain.token_ids[0]: -100.0})
    assert banned.token_ids[0] != plain.token_ids[0]
    # the reported logprob is of the raw logits: the forced token was not likely, and says so
    assert forced.logprobs[0] < plain.logprobs[0]


def test_a_frequency_penalty_breaks_a_loop_and_presence_bans_a_second_use(loaded):
    model, tok = loaded
    loop = generate(model, tok, "The sea", max_new_tokens=24, logit_bias={220: 20.0})
    assert loop.token_ids == [220] * 24  # the bias alone: one token forever
    freq = generate(model, tok, "The sea", max_new_tokens=24, logit_bias={220: 20.0}, frequency_penalty=2.0)
    assert 1 < freq.token_ids.count(220) < 24  # each use costs 2 more: it wins a few times, then others do
    # a bias of 4 wins token 220 two places; with presence 2 its second use is net +2, no longer enough
    twice = generate(model, tok, "The sea", max_new_tokens=24, logit_bias={220: 4.0})
    once = generate(model, tok, "The sea", max_new_tokens=24, logit_bias={220: 4.0}, presence_penalty=2.0)
    # (2 and 1 here; stated as an inequality so another host's float32 sums, nudging a near-tie, cannot flip it)
    assert twice.token_ids.count(220) >= 2 and once.token_ids.count(220) < twice.token_ids.count(220)
