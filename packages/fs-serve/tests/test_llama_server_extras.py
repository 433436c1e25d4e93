"""What llama-server's and mlx_lm.server's users send, answered as those servers answer it: ``/tokenize`` and
``/detokenize`` on the model's own tokenizer, the un-versioned ``/chat/completions`` / ``/completions`` routes, and
``n_predict`` as the token budget (it used to be ignored: 1,021 tokens came back for ``n_predict: 4``), and CORS for
browser pages on the origins ``--allowed-origins`` names."""

import httpx


def post(server, path, body):
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def test_tokenize_and_detokenize_round_trip_on_the_served_tokenizer(server, tiny):
    _, tok = tiny
    text = "<|im_start|>user\nnaïve café 你好<|im_end|>"
    r = post(server, "/tokenize", {"content": text})
    assert r.status_code == 200 and r.json() == {"tokens": list(tok.encode(text))}
    pieces = post(server, "/tokenize", {"content": "héllo", "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == list(tok.encode("héllo")) and "".join(p["piece"] for p in pieces) == "héllo"
    back = post(server, "/detokenize", {"tokens": r.json()["tokens"]})
    assert back.status_code == 200 and back.json() == {"content": text}
    bad = post(server, "/detokenize", {"tokens": [10**9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    assert post(server, "/tokenize", {"content": 5}).json()["error"]["param"] == "content"


def test_the_unversioned_routes_and_n_predict(server):
    body = {"messages": [{"role": "user", "content": "hi"}], "n_predict": 4, "temperature": 0, "ignore_eos": True}
    r = post(server, "/chat/completions", body)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4, r.text
    r = post(server, "/completions", {"prompt": "hi", "n_predict": 3, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text
    both = post(server, "/v1/completions", {"prompt": "hi", "n_predict": 9, "max_tokens": 2, "ignore_eos": True})
    assert both.json()["usage"]["completion_tokens"] == 2  # max_tokens, when given, wins


def test_cors_answers_only_the_allowed_origins(tiny):
    from serving import start

    s = start(*tiny, allowed_origins=["http://page.test"])
    try:
        pre = {"Origin": "http://page.test", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}  # fmt: skip
        r = httpx.options(f"{s.url}/v1/chat/completions", headers=pre)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://page.test"
        r = httpx.get(f"{s.url}/v1/models", headers={"Origin": "http://page.test"})
        assert r.headers["access-control-allow-origin"] == "http://page.test"
        r = httpx.get(f"{s.url}/v1/models", headers={"Origin": "http://elsewhere.test"})
        assert "access-control-allow-origin" not in r.headers
    finally:
        s.stop()
