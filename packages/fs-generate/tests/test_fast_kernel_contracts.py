"""The equality contracts on the fast paths users run: bf16, int8 and int4 weights on the numba kernels
(`nox -s kernels`), bit for bit — batch == one by one, and a radix prefix-cache hit == a cold prefill, down to
every token's log-probability (a float32 that differs in its last bit would show)."""

import pytest

from fs_generate import generate, generate_batch, load
from fs_generate.generate import Generator
from fs_kvcache import RadixPrefixCache

FORMATS = {"bf16": {"dtype": "native"}, "int8": {"quantize": "int8"}, "int4": {"quantize": "int4"}}
PROMPTS = ["The capital of France is", "def fibonacci(n):", "你好", "A much longer prompt, with more tokens in it."]


@pytest.fixture(scope="module")
def bf16_dir(tmp_path_factory, qwen3_tokenizer_dir):
    from fs_model import cpu
    from fs_weights import preset, write_random_checkpoint

    if not cpu.HAVE_NUMBA:  # the kernels session installs fs-model[fast]: there this must not skip
        pytest.skip("numba is not installed: the kept-weight kernels are tested by `nox -s kernels`")
    return write_random_checkpoint(
        tmp_path_factory.mktemp("fast") / "bf16", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir
    )


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_batch_equals_one_by_one_bitwise(bf16_dir, fmt):
    model, tok = load(str(bf16_dir), **FORMATS[fmt])
    solo = [generate(model, tok, p, max_new_tokens=10, eos_token_ids=[]) for p in PROMPTS]
    batch = generate_batch(model, tok, PROMPTS, max_new_tokens=10, eos_token_ids=[])
    assert [b.token_ids for b in batch] == [s.token_ids for s in solo]
    assert [b.logprobs for b in batch] == [s.logprobs for s in solo]


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_radix_hit_equals_a_cold_prefill_bitwise(bf16_dir, fmt):
    model, tok = load(str(bf16_dir), **FORMATS[fmt])
    system = "You are a careful assistant. " * 8
    radix = RadixPrefixCache(("tiny", fmt), block_size=16)
    list(
        Generator(model, tok, system + "Question one?", max_new_tokens=8, eos_token_ids=[], prefix_cache=radix).steps()
    )
    hit = Generator(model, tok, system + "Question two?", max_new_tokens=8, eos_token_ids=[], prefix_cache=radix)
    list(hit.steps())
    cold = generate(model, tok, system + "Question two?", max_new_tokens=8, eos_token_ids=[])
    assert hit.reused > 0
    assert hit.result.token_ids == cold.token_ids and hit.result.logprobs == cold.logprobs


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_prompt_cache_file_equals_a_cold_prefill_bitwise(bf16_dir, fmt, tmp_path):
    """fs-cache-prompt's file (bf16 K/V stored as its bits) loaded back == prefilling the same ids cold."""
    from fs_generate.reused_prefix import load_prompt, prefill_state, save_prompt

    model, tok = load(str(bf16_dir), **FORMATS[fmt])
    cached = tok.encode("You are a careful assistant. " * 100)  # 601 tokens: two prefill chunks
    save_prompt(tmp_path / "p.safetensors", model, tok, cached, prefill_state(model, cached))
    prefix = load_prompt(tmp_path / "p.safetensors", model, tok)
    ids = cached + tok.encode(" Question?")
    hit = Generator(model, tok, ids, max_new_tokens=8, eos_token_ids=[], prefix_cache=prefix)
    list(hit.steps())
    cold = generate(model, tok, ids, max_new_tokens=8, eos_token_ids=[])
    assert hit.reused == len(cached)
    assert hit.result.token_ids == cold.token_ids and hit.result.logprobs == cold.logprobs


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_chat_turn_on_kept_kv_equals_a_cold_prefill_bitwise(bf16_dir, fmt):
    """fs-chat's second turn resumes the first turn's K/V; its answer equals prefilling the whole conversation."""
    from fs_generate.chat_session import ChatSession

    model, tok = load(str(bf16_dir), **FORMATS[fmt])
    chat = ChatSession(model, tok, system="be brief", max_new_tokens=12, eos_token_ids=[])
    list(chat.ask("The capital of France is"))
    before = list(chat.tokens)
    list(chat.ask("And of Spain?"))
    cold = generate(model, tok, chat.tokens[: len(chat.tokens) - len(chat.last.token_ids)], max_new_tokens=12,
                    eos_token_ids=[])  # fmt: skip
    assert chat.reused == len(before) - 1  # every position but the answer's last token, which was never fed
    assert chat.last.token_ids == cold.token_ids and chat.last.logprobs == cold.logprobs
