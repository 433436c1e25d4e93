"""A Qwen3-MoE behind the server: concurrent chat requests through the openai client each get what
``fs_generate.generate`` gives for the same rendered prompt alone (the engine batches them; the router's choices and
their mix must not depend on the other requests in a step)."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from fs_generate import generate
from serving import start

QUESTIONS = ["Name a colour.", "What is 2 + 2?", "Say hello in French."]


@pytest.fixture(scope="module")
def moe(tmp_path_factory, qwen3_tokenizer_dir):
    from fs_model import load_model
    from fs_tokenizer import Tokenizer
    from fs_weights import preset, write_random_checkpoint

    c = preset("tiny", model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64)
    d = write_random_checkpoint(tmp_path_factory.mktemp("moe") / "m", c, dtype="float32", tokenizer=qwen3_tokenizer_dir)
    model, tok = load_model(d), Tokenizer.from_pretrained(d)
    s = start(model, tok, model_id="moe")
    yield s, model, tok
    s.stop()


def test_concurrent_chats_on_a_sparse_model_equal_generate(moe):
    server, model, tok = moe
    client = server.client()

    def ask(q: str) -> str:
        r = client.chat.completions.create(model="moe", messages=[{"role": "user", "content": q}], max_tokens=10,
                                           temperature=0)  # fmt: skip
        return r.choices[0].message.content

    with ThreadPoolExecutor(len(QUESTIONS)) as pool:
        answers = list(pool.map(ask, QUESTIONS))
    for q, got in zip(QUESTIONS, answers, strict=True):
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        assert got == generate(model, tok, ids, max_new_tokens=10).text
