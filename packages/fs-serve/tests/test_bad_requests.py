"""Bad requests get OpenAI's error shape with the right status and the field named; hundreds of malformed bodies
never get a 500 and never stop the server from answering."""

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

GOOD = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}


def post(server, body, path="/v1/chat/completions", **kw):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.url}{path}", content=data, headers={"content-type": "application/json"}, **kw)


def error(r, status):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["message"]
    assert "Traceback" not in r.text
    return e


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"\xff\xfe", 400, None),
        ([1, 2], 400, None),
        (GOOD | {"messages": []}, 400, "messages"),
        (GOOD | {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role"),
        (GOOD | {"messages": [{"content": "x"}]}, 400, "messages.0.role"),
        (GOOD | {"temperature": "hot"}, 400, "temperature"),
        (GOOD | {"temperature": 7}, 400, "temperature"),
        (GOOD | {"max_tokens": -1}, 400, "max_tokens"),
        (GOOD | {"n": 0}, 400, "n"),
        (GOOD | {"stop": ""}, 400, "stop"),
        (GOOD | {"presence_penalty": 2.5}, 400, "presence_penalty"),
        (GOOD | {"logit_bias": {"the": 1}}, 400, "logit_bias"),
        (GOOD | {"logit_bias": {"5": 101}}, 400, "logit_bias.5"),
        (GOOD | {"logit_bias": {"999999": 1}}, 400, None),  # past the vocabulary: the engine says so
        (GOOD | {"top_logprobs": 3}, 400, "top_logprobs"),
        (GOOD | {"tool_choice": "required"}, 400, "tool_choice"),
        (GOOD | {"reasoning_effort": "low"}, 400, "reasoning_effort"),  # not implemented: refused, not ignored
        (GOOD | {"prediction": {"type": "content", "content": "x"}}, 400, "prediction"),
        (GOOD | {"store": True}, 400, "store"),
        (GOOD | {"adapters": "adapters/"}, 400, "adapters"),  # mlx_lm.server's per-request LoRA: one, at start
        (GOOD | {"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, 400, "response_format"),
        (GOOD | {"grammar": "root ::= ("}, 400, "grammar"),
        (GOOD | {"json_schema": {"type": "nope"}}, 400, "json_schema"),
        (GOOD | {"response_format": {"type": "xml"}}, 400, "response_format.type"),
        (GOOD | {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "nope"}}}}, 400, None),
        (GOOD | {"chat_template_kwargs": {"add_generation_prompt": False}}, 400, "messages"),  # the template raises
        (GOOD | {"model": "gpt-4o"}, 404, "model"),
    ],
)
def test_bad_chat_requests(server, body, status, param):
    e = error(post(server, body), status)
    if param is not None:
        assert e["param"] == param


def test_bad_completion_requests(server):
    e = error(post(server, {"prompt": [1, -3], "max_tokens": 2}, "/v1/completions"), 400)
    assert e["param"].startswith("prompt")
    error(post(server, {"prompt": [10**9], "max_tokens": 2}, "/v1/completions"), 400)
    assert error(post(server, {"prompt": "x", "suffix": "y"}, "/v1/completions"), 400)["param"] == "suffix"
    assert error(post(server, {"prompt": "x", "best_of": 3}, "/v1/completions"), 400)["param"] == "best_of"
    error(post(server, {"prompt": "x" * 40000, "max_tokens": 1}, "/v1/completions"), 400)  # past the context


def test_routes_methods_and_size(server):
    error(httpx.get(f"{server.url}/v1/nothing"), 404)
    error(httpx.get(f"{server.url}/v1/chat/completions"), 405)
    big = json.dumps(GOOD | {"user": "x" * (5 << 20)}).encode()
    error(post(server, big), 413)


def test_max_tokens_is_capped_by_the_context(server, tiny):
    model, _ = tiny
    ctx = model.config.max_position_embeddings
    body = {"prompt": [100] * (ctx - 6), "max_tokens": 10**9, "temperature": 0}
    r = post(server, body, "/v1/completions", timeout=120)  # accepted and capped (llama-server's, mlx-lm's way)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 6 and r.json()["choices"][0]["finish_reason"] == "length"


values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4),
    max_leaves=12,
)
FIELDS = [
    "model",
    "messages",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "n",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
    "response_format",
    "stream_options",
    "chat_template_kwargs",
    "prompt",
]


@st.composite
def bodies(draw):
    kind = draw(st.sampled_from(["raw", "value", "mutated"]))
    if kind == "raw":
        return draw(st.binary(max_size=64))
    if kind == "value":
        return json.dumps(draw(values), allow_nan=True).encode()
    body = dict(GOOD)
    for _ in range(draw(st.integers(1, 3))):
        body[draw(st.sampled_from(FIELDS))] = draw(values)
    body["max_tokens"] = draw(st.integers(0, 3)) if draw(st.booleans()) else body.get("max_tokens")
    return json.dumps(body, allow_nan=True).encode()


@settings(
    max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies(), path=st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/responses",
                                            "/v1/embeddings"]))  # fmt: skip
def test_fuzzed_bodies_get_4xx_json_and_the_server_keeps_answering(server, body, path):
    r = post(server, body, path, timeout=60)
    assert r.status_code in (200, 400, 404), (r.status_code, r.text[:300])
    if r.status_code != 200:
        error(r, r.status_code)


def test_still_serving_after_the_fuzz(server):
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    assert post(server, GOOD).status_code == 200
    assert server.state.engine.stats()["running"] == 0
