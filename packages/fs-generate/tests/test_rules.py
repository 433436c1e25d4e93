"""Every rule of the generation contract, forced with a toy model whose logits the test chooses."""

import numpy as np
import pytest

from fs_generate import GenerateError, generate, stream_generate
from fs_generate.sampling import SamplingParams, distribution
from toy import ByteTokenizer, ToyModel, one_hot, spell

TOK = ByteTokenizer()


def test_eos_at_step_one_is_reported_not_returned():
    m = ToyModel(lambda seq: one_hot(7), eos_token_id=7)
    g = generate(m, TOK, "hi", max_new_tokens=5)
    assert (g.token_ids, g.text, g.finish_reason, g.eos_token_id) == ([], "", "eos", 7)
    steps = list(stream_generate(ToyModel(lambda seq: one_hot(7), eos_token_id=7), TOK, "hi", max_new_tokens=5))
    assert [(s.token_id, s.text, s.finish_reason) for s in steps] == [(7, "", "eos")]


def test_eos_set_is_a_union_and_can_be_overridden():
    m = ToyModel(spell("ab\x05", after=1), eos_token_id=[5, 9])
    assert generate(m, TOK, "x", max_new_tokens=10).token_ids == [97, 98]
    m = ToyModel(spell("ab\x05c", after=1), eos_token_id=[5])
    g = generate(m, TOK, "x", max_new_tokens=4, eos_token_ids=[])
    assert g.token_ids == [97, 98, 5, 99] and g.finish_reason == "length"
    g = generate(ToyModel(spell("abc", after=1)), TOK, "x", max_new_tokens=5, eos_token_ids=[98])
    assert g.token_ids == [97] and g.eos_token_id == 98


def test_greedy_ties_go_to_the_lowest_id():
    z = np.zeros(256, np.float32)
    z[[200, 65, 150]] = 3.0
    assert generate(ToyModel(lambda seq: z), TOK, "x", max_new_tokens=1).token_ids == [65]


def test_zero_budget_does_no_forward_pass():
    m = ToyModel(lambda seq: one_hot(1))
    g = generate(m, TOK, "hello", max_new_tokens=0)
    assert (g.token_ids, g.finish_reason, m.calls) == ([], "length", [])


def test_prompt_at_and_one_past_the_context_limit():
    m = ToyModel(lambda seq: one_hot(65), max_position_embeddings=8)
    at = generate(m, TOK, "12345678", max_new_tokens=3)
    assert (at.token_ids, at.finish_reason, m.calls) == ([], "context", [])
    with pytest.raises(GenerateError, match="prompt is 9 tokens, longer than the context limit of 8"):
        generate(m, TOK, "123456789", max_new_tokens=3)
    g = generate(m, TOK, "12345", max_new_tokens=10)
    assert g.token_ids == [65, 65, 65] and g.finish_reason == "context"  # 5 + 3 = 8 positions
    g = generate(m, TOK, "12345", max_new_tokens=10, context_limit=6)
    assert len(g.token_ids) == 1 and g.finish_reason == "context"


def test_stop_string_split_across_tokens():
    m = ToyModel(spell("hello STOP world", after=1))
    steps = list(stream_generate(m, TOK, "x", max_new_tokens=30, stop=["STOP"]))
    g = generate(ToyModel(spell("hello STOP world", after=1)), TOK, "x", max_new_tokens=30, stop=["STOP"])
    assert g.finish_reason == "stop" and g.text == "hello "
    assert g.token_ids == list(b"hello STOP")  # tokens are the truth; the text is cut before the stop string
    assert "".join(s.text for s in steps) == TOK.decode(g.token_ids)
    assert steps[-1].finish_reason == "stop"


def test_multibyte_character_split_across_tokens_streams_whole():
    text = "é😀中"
    steps = list(stream_generate(ToyModel(spell(text, after=1)), TOK, "x", max_new_tokens=len(text.encode())))
    assert len(steps) == 9 and "".join(s.text for s in steps) == text
    assert [s.text for s in steps if s.text] == ["é", "😀", "中"]


def test_invalid_bytes_become_replacement_at_flush():
    steps = list(stream_generate(ToyModel(spell("a\xf0", after=1)), TOK, "x", max_new_tokens=3))
    ids = [s.token_id for s in steps]
    assert "".join(s.text for s in steps) == TOK.decode(ids)


def test_seeded_sampling_is_reproducible():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((64, 256)).astype(np.float32)
    script = lambda seq: table[len(seq) % 64]  # noqa: E731
    a = generate(ToyModel(script), TOK, "x", max_new_tokens=30, temperature=1.0, seed=11).token_ids
    b = generate(ToyModel(script), TOK, "x", max_new_tokens=30, temperature=1.0, seed=11).token_ids
    c = generate(ToyModel(script), TOK, "x", max_new_tokens=30, temperature=1.0, seed=12).token_ids
    assert a == b != c


def test_top_k_top_p_min_p_boundaries():
    z = np.log(np.array([0.1, 0.4, 0.3, 0.2], np.float64)).astype(np.float32)
    d = lambda **kw: distribution(z, SamplingParams(temperature=1.0, **kw))  # noqa: E731
    assert np.flatnonzero(d(top_k=2)).tolist() == [1, 2]
    tie = np.array([1.0, 2.0, 2.0, 2.0], np.float32)
    assert np.flatnonzero(distribution(tie, SamplingParams(temperature=1.0, top_k=2))).tolist() == [1, 2]
    assert np.flatnonzero(d(top_p=0.7)).tolist() == [1, 2]  # 0.4 + 0.3 reaches 0.7 exactly
    assert np.flatnonzero(d(top_p=0.71)).tolist() == [1, 2, 3]
    assert np.flatnonzero(d(top_p=0.01)).tolist() == [1]  # always at least one
    assert np.flatnonzero(d(min_p=0.49)).tolist() == [1, 2, 3]  # keep p >= 0.49 * 0.4
    assert np.flatnonzero(d(min_p=0.51)).tolist() == [1, 2]  # 0.2 < 0.51 * 0.4: dropped
    assert np.flatnonzero(d(min_p=0.76)).tolist() == [1]
    kept = d(top_k=3, top_p=0.6)  # order: top-k first, then top-p on the renormalized survivors
    np.testing.assert_allclose(kept[[1, 2]], [0.4 / 0.7, 0.3 / 0.7])
    assert abs(d(top_k=3).sum() - 1) < 1e-12


def test_temperature_shapes_the_distribution_chi_square():
    """Draws from softmax(z / T) must match it: chi-square over 20,000 draws, 5 bins (df 4, p=0.001: 18.47)."""
    z = np.array([2.0, 1.0, 0.5, 0.0, -1.0], np.float32)
    for T in (0.5, 1.0, 2.0):
        want = np.exp(z / T) / np.exp(z / T).sum()
        rng = np.random.default_rng(int(T * 10))
        from fs_generate.sampling import choose

        draws = np.bincount([choose(z, SamplingParams(temperature=T), rng, []) for _ in range(20_000)], minlength=5)
        chi2 = float((((draws - 20_000 * want) ** 2) / (20_000 * want)).sum())
        assert chi2 < 18.47, (T, draws, want)


def test_repetition_penalty_mlx_lm_semantics():
    from fs_generate.sampling import apply_repetition_penalty

    z = np.array([2.0, -2.0, 1.0, 3.0], np.float32)
    out = apply_repetition_penalty(z, [0, 1, 1, 3], penalty=2.0, window=20)
    np.testing.assert_allclose(out, [1.0, -4.0, 1.0, 1.5])
    assert apply_repetition_penalty(z, [3, 0, 1], 2.0, window=1)[3] == 3.0  # only the last token counts


def test_cached_and_uncached_paths_agree_on_the_toy():
    script = spell("abcdefgh", after=2)
    a, b = ToyModel(script), ToyModel(script)
    ga = generate(a, TOK, "xy", max_new_tokens=8)
    gb = generate(b, TOK, "xy", max_new_tokens=8, use_cache=False)
    assert ga.token_ids == gb.token_ids == list(b"abcdefgh")
    assert [c[1] for c in a.calls] == [0, *range(2, 9)] and a.calls[0] == ([120, 121], 0, True)
    assert all(len(c[0]) == 1 for c in a.calls[1:])  # one token per step after the prefill
    assert [len(c[0]) for c in b.calls] == list(range(2, 10))  # the oracle recomputes the whole prefix


@pytest.mark.parametrize(
    "kw,words",
    [
        (dict(prompt=""), "empty prompt"),
        (dict(prompt=[]), "empty prompt"),
        (dict(prompt=[1, 256]), "prompt token id 256 at position 1 is out of range"),
        (dict(prompt=[1.0]), "only ints"),
        (dict(max_new_tokens=-1), "max_new_tokens must be an int >= 0"),
        (dict(temperature=-0.1), "temperature must be a finite number >= 0"),
        (dict(top_p=0.0), "top_p must be in \\(0, 1\\]"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k must be an int >= 0"),
        (dict(min_p=2.0), "min_p"),
        (dict(stop=[""]), "stop strings must be non-empty"),
        (dict(eos_token_ids=[-1]), "eos_token_ids"),
    ],
)
def test_bad_requests_fail_before_compute(kw, words):
    m = ToyModel(lambda seq: one_hot(1))
    args = dict(prompt="hi", max_new_tokens=3) | kw
    with pytest.raises(GenerateError, match=words):
        generate(m, TOK, args.pop("prompt"), **args)
    assert m.calls == []
