"""``echo`` on /v1/completions (echo.py): the prompt comes back first, its tokens scored as fs_generate.scoring
scores them (the first ``null``), then the generated tokens as ``generate`` reports them - lm-eval's
loglikelihood request, answered."""

import httpx
import numpy as np

from fs_generate import generate
from fs_generate.scoring import score


def post(server, body):
    return httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)


def test_echo_scores_the_prompt_then_generates(server, tiny):
    model, tok = tiny
    prompt = "The capital of France is Paris"
    ids = list(tok.encode(prompt))
    r = post(server, {"prompt": prompt, "echo": True, "logprobs": 2, "max_tokens": 3, "temperature": 0,
                      "ignore_eos": True})  # fmt: skip
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    want = score(model, [ids], top_logprobs=2)[0]
    gen = generate(model, tok, ids, max_new_tokens=3, eos_token_ids=[])
    assert choice["text"] == prompt + gen.text
    assert lp["tokens"][: len(ids)] == [tok.token_bytes(i).decode("utf-8", "replace") for i in ids]
    assert lp["token_logprobs"][: len(ids)] == want.logprobs  # the same function: the same numbers
    assert lp["top_logprobs"][0] is None and all(len(t) == 2 for t in lp["top_logprobs"][1:])
    np.testing.assert_allclose(lp["token_logprobs"][len(ids) :], gen.logprobs, rtol=1e-6)
    assert lp["text_offset"][len(ids)] == len(prompt)  # the generated text starts where the prompt ends
    assert r.json()["usage"]["prompt_tokens"] == len(ids)


def test_max_tokens_0_returns_only_the_scored_prompt_and_a_stream_says_the_same(server, tiny):
    """lm-eval's loglikelihood form; and ``stream`` concatenates to the non-streamed answer."""
    import json

    model, tok = tiny
    body = {"prompt": [785, 6722, 315, 9625, 374], "echo": True, "logprobs": 1, "max_tokens": 0, "temperature": 0}
    whole = post(server, body).json()["choices"][0]
    assert whole["text"] == tok.decode(body["prompt"]) and whole["finish_reason"] == "length"
    assert whole["logprobs"]["token_logprobs"] == score(model, [body["prompt"]])[0].logprobs
    r = httpx.post(f"{server.url}/v1/completions", json=body | {"stream": True}, timeout=60)
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["text"]
    streamed = [v for c in chunks if c["choices"][0]["logprobs"] for v in c["choices"][0]["logprobs"]["token_logprobs"]]
    assert streamed == whole["logprobs"]["token_logprobs"]


def test_echo_without_logprobs_is_the_prompt_and_n_choices_each_start_with_it(server):
    r = post(server, {"prompt": ["ab", "cd"], "echo": True, "max_tokens": 2, "n": 2, "temperature": 0})
    texts = [c["text"] for c in r.json()["choices"]]
    assert r.status_code == 200 and [t[:2] for t in texts] == ["ab", "ab", "cd", "cd"]
    assert all(c["logprobs"] is None for c in r.json()["choices"])
