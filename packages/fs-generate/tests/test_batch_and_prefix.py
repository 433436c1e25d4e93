"""generate_batch == one-by-one generation, and a radix prefix cache that skips a shared prompt's prefill."""

import pytest

from fs_generate import GenerateError, generate, generate_batch, load
from fs_generate.generate import Generator
from fs_kvcache import RadixPrefixCache

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "你好",
    "A much longer prompt, with several more tokens in it.",
]


def check_batch_equals_sequential(model, tok, **kw):
    seq = [generate(model, tok, p, max_new_tokens=12, **kw) for p in PROMPTS]
    bat = generate_batch(model, tok, PROMPTS, max_new_tokens=12, **kw)
    assert [b.token_ids for b in bat] == [s.token_ids for s in seq]
    assert [b.finish_reason for b in bat] == [s.finish_reason for s in seq]
    assert [b.text for b in bat] == [s.text for s in seq]
    return seq, bat


def test_batch_equals_sequential_greedy_with_per_sequence_stop(tiny_dir):
    model, tok = load(str(tiny_dir))
    seq, _ = check_batch_equals_sequential(model, tok, eos_token_ids=[])
    eos = seq[1].token_ids[2]  # makes row 1 stop at its third token, whatever the others do
    seq, bat = check_batch_equals_sequential(model, tok, eos_token_ids=[eos])
    assert bat[1].finish_reason == "eos" and len(bat[1].token_ids) == 2


def test_batch_equals_sequential_sampled(tiny_dir):
    model, tok = load(str(tiny_dir))
    check_batch_equals_sequential(model, tok, eos_token_ids=[], temperature=0.9, top_k=50, seed=3)


@pytest.mark.parity
def test_batch_on_the_mlx_backend(tiny_dir, reference):
    reference("mlx.core")
    model, tok = load(str(tiny_dir), backend="mlx", dtype="float32")
    check_batch_equals_sequential(model, tok, eos_token_ids=[])


def test_batch_bad_input(tiny_dir):
    model, tok = load(str(tiny_dir))
    with pytest.raises(GenerateError, match="non-empty list"):
        generate_batch(model, tok, [], max_new_tokens=3)
    with pytest.raises(GenerateError, match="empty prompt"):
        generate_batch(model, tok, ["ok", ""], max_new_tokens=3)
    out = generate_batch(model, tok, ["a", "b"], max_new_tokens=0)
    assert [g.finish_reason for g in out] == ["length", "length"]
    for spec in (dict(prompt_lookup_num_tokens=4), dict(draft_model=model)):  # refused by name, not ignored
        with pytest.raises(GenerateError, match="generate_batch does not speculate: the Engine does"):
            generate_batch(model, tok, ["a", "b"], max_new_tokens=3, **spec)


def test_prefix_cache_skips_the_shared_prefill(tiny_dir):
    model, tok = load(str(tiny_dir))
    system = "You are a careful assistant. " * 8
    radix = RadixPrefixCache(("tiny", "float32"), block_size=16)
    first = Generator(model, tok, system + "Question one?", max_new_tokens=8, eos_token_ids=[], prefix_cache=radix)
    list(first.steps())
    assert first.reused == 0 and len(radix) == 1
    second = Generator(model, tok, system + "Question two?", max_new_tokens=8, eos_token_ids=[], prefix_cache=radix)
    list(second.steps())
    shared = len(tok.encode(system))
    assert second.reused == shared // 16 * 16 > 0  # block-aligned part of the shared system text
    plain = generate(model, tok, system + "Question two?", max_new_tokens=8, eos_token_ids=[])
    assert second.result.token_ids == plain.token_ids
