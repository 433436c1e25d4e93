"""Speculative decoding behind the server: concurrent chats each get ``fs_generate.generate``'s tokens for the same
rendered prompt alone, with every request's drafts verified inside the engine's batch, and ``/metrics`` counts the
drafted and accepted tokens (vLLM's names)."""

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from fs_generate import generate
from serving import start

QUESTIONS = ["Name a colour.", "What is 2 + 2?", "Say hello in French."]


@pytest.fixture(scope="module")
def served(tmp_path_factory, qwen3_tokenizer_dir):
    from fs_model import cpu, load_model
    from fs_tokenizer import Tokenizer
    from fs_weights import preset, write_random_checkpoint

    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: speculation needs the batch-invariant kernels")
    d = write_random_checkpoint(tmp_path_factory.mktemp("spec") / "m", preset("tiny"), dtype="bfloat16",
                                tokenizer=qwen3_tokenizer_dir)  # fmt: skip
    model, tok = load_model(d), Tokenizer.from_pretrained(d)
    # the model drafting for itself: every greedy guess is confirmed, so most tokens come from drafts
    s = start(model, tok, model_id="spec", speculation=lambda m, t: {"draft_model": m, "num_draft_tokens": 4})
    yield s, model, tok
    s.stop()


def counter(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def test_concurrent_chats_with_a_draft_model_equal_generate(served):
    server, model, tok = served
    client = server.client()

    def ask(q: str) -> str:
        r = client.chat.completions.create(model="spec", messages=[{"role": "user", "content": q}], max_tokens=12,
                                           temperature=0)  # fmt: skip
        return r.choices[0].message.content

    with ThreadPoolExecutor(len(QUESTIONS)) as pool:
        answers = list(pool.map(ask, QUESTIONS))
    for q, got in zip(QUESTIONS, answers, strict=True):
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        assert got == generate(model, tok, ids, max_new_tokens=12).text
    text = httpx.get(f"{server.url}/metrics").text
    drafted = counter(text, "fs:spec_decode_num_draft_tokens_total")
    accepted = counter(text, "fs:spec_decode_num_accepted_tokens_total")
    assert accepted == drafted >= len(QUESTIONS) * 6


def test_contradicting_speculation_flags_fail_before_loading(capsys):
    from fs_serve.cli import main

    assert main(["--draft-model", "x", "--prompt-lookup-num-tokens", "2"]) == 1
    assert "two draft sources" in capsys.readouterr().err
