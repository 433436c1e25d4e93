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
    assert back.status_code == 200 and back.json() == {"content": text, "prompt": text}  # llama-server's, vLLM's
    bad = post(server, "/detokenize", {"tokens": [10**9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    assert post(server, "/tokenize", {"content": 5}).json()["error"]["param"] == "content"


def test_vllms_tokenize_dialect_and_tokenizer_info_as_lm_eval_probes_them(server, tiny):
    """lm-eval's local-completions model uses a "remote tokenizer" when ``/tokenizer_info`` has ``eos_token`` and
    ``/tokenize`` answers ``{"prompt": ...}`` with a token list (lm_eval.utils.check_remote_tokenizer_support)."""
    model, tok = tiny
    info = httpx.get(f"{server.url}/tokenizer_info").json()
    assert info["eos_token"] == "<|im_end|>" and "<|im_start|>" in info["chat_template"]
    assert info["model_max_length"] == model.config.max_position_embeddings
    r = post(server, "/tokenize", {"prompt": "test", "add_special_tokens": False}).json()
    assert r == {"tokens": list(tok.encode("test")), "count": len(tok.encode("test")),
                 "max_model_len": model.config.max_position_embeddings}  # fmt: skip
    chat = [{"role": "user", "content": "hi"}]
    r = post(server, "/tokenize", {"messages": chat}).json()
    assert r["tokens"] == tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
    both = post(server, "/tokenize", {"prompt": "a", "content": "b"})
    assert both.status_code == 400 and both.json()["error"]["param"] == "content"


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


def test_penalties_and_logit_bias_are_the_engines_own(server, tiny):
    """OpenAI's ``logit_bias`` / ``presence_penalty`` / ``frequency_penalty`` reach the engine: the answer is
    ``fs_generate.generate``'s with the same arguments, token for token."""
    from fs_generate import generate

    model, tok = tiny
    body = {"prompt": "The sea", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    for extra, kw in [
        ({"logit_bias": {"220": 100}}, {"logit_bias": {220: 100.0}}),
        ({"logit_bias": {"220": 20}, "frequency_penalty": 2.0}, {"logit_bias": {220: 20.0}, "frequency_penalty": 2.0}),
        ({"presence_penalty": -2, "frequency_penalty": 1.5}, {"presence_penalty": -2.0, "frequency_penalty": 1.5}),
    ]:
        r = post(server, "/v1/completions", body | extra)
        want = generate(model, tok, "The sea", max_new_tokens=12, eos_token_ids=[], **kw)
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == want.text, (extra, r.text)
    pinned = post(server, "/v1/completions", body | {"logit_bias": {"220": 100}}).json()["choices"][0]["text"]
    assert pinned == tok.decode([220] * 12)


def test_gbnf_grammar_and_json_schema_fields_constrain_both_endpoints(server):
    """llama-server's ``grammar`` (GBNF) and ``json_schema`` request fields: a random model's output obeys them."""
    import json

    for path, base in [("/v1/completions", {"prompt": "Answer:"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "ok?"}]})]:  # fmt: skip
        body = base | {"max_tokens": 20, "temperature": 1.0, "seed": 3}
        for seed in range(3):
            r = post(server, path, body | {"grammar": 'root ::= ("yes" | "no") "!"', "seed": seed})
            choice = r.json()["choices"][0]
            text = choice.get("text", choice.get("message", {}).get("content"))
            assert r.status_code == 200 and text in ("yes!", "no!"), r.text
        schema = {"type": "object", "properties": {"a": {"enum": ["x", "y"]}}, "required": ["a"]}
        r = post(server, path, body | {"json_schema": schema})
        choice = r.json()["choices"][0]
        text = choice.get("text", choice.get("message", {}).get("content"))
        assert choice["finish_reason"] == "stop" and json.loads(text) in ({"a": "x"}, {"a": "y"}), text


def test_fields_that_change_no_output_are_accepted(server):
    body = {"prompt": "hi", "max_tokens": 2, "temperature": 0}
    quiet = {"user": "u1", "metadata": {"run": "a"}, "store": False, "service_tier": "auto",
             "prompt_cache_key": "k", "cache_prompt": True}  # fmt: skip
    a, b = post(server, "/v1/completions", body), post(server, "/v1/completions", body | quiet)
    assert b.status_code == 200 and a.json()["choices"] == b.json()["choices"], b.text
