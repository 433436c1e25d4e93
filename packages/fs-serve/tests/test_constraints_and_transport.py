"""The doors a red team found open: schemas and patterns the grammar compiler refuses, text that is not Unicode,
and ambiguous HTTP framing. Each is a 400 naming the field (or closing the connection), never a 5xx: a property
test over bodies with tools and schemas proves it."""

import json
import socket

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MSGS = [{"role": "user", "content": "hi"}]
GOOD = {"model": "tiny", "messages": MSGS, "max_tokens": 2, "temperature": 0}
SELF_REF = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}


def post(server, body: bytes | dict):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{server.url}/v1/chat/completions", content=data, headers={"content-type": "application/json"}, timeout=60
    )


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def tool(parameters):
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


def deep(n: int) -> dict:
    out: dict = {}
    cur = out
    for _ in range(n):
        cur["items"] = {}
        cur = cur["items"]
    return out


@pytest.mark.parametrize(
    "extra, param, words",
    [
        ({"tools": tool(SELF_REF), "tool_choice": "required"}, "tools", "Pointer '/$defs/a' does not exist"),
        (
            {
                "tools": tool({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}),
                "tool_choice": "required",
            },
            "tools",
            "unclosed group",
        ),
        ({"response_format": schema_format(SELF_REF)}, "response_format", "admits no output"),
        (
            {"response_format": schema_format({"type": "string", "pattern": "(?=a)"})},
            "response_format",
            "look-around",
        ),
        ({"response_format": schema_format(deep(500))}, "response_format", "nested deeper than 64 levels"),
        ({"response_format": schema_format({"type": "integer", "minimum": 5, "maximum": 1})}, "response_format", ""),
    ],
)
def test_a_constraint_the_compiler_refuses_is_a_400_naming_the_field(server, extra, param, words):
    r = post(server, GOOD | extra)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["param"] == param and words in e["message"], e


def test_a_lone_surrogate_is_a_400_naming_where_it_is(server):
    body = json.dumps(GOOD).replace('"hi"', '"a\\ud800b"').encode()
    r = post(server, body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.0.content", r.text
    paired = json.dumps(GOOD).replace('"hi"', '"a\\ud83d\\ude00b"').encode()  # a valid pair is an emoji
    assert post(server, paired).status_code == 200


def test_content_length_with_transfer_encoding_is_refused_and_the_connection_closed(server):
    """The smuggled request after the chunked body must never be answered (RFC 9112 section 6.3)."""
    body = b"0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(head.encode() + b"Transfer-Encoding: chunked\r\n\r\n" + body)
        data = b""
        while chunk := s.recv(65536):  # returns b"" once the server closes
            data += chunk
    assert data.startswith(b"HTTP/1.1 400") and b"connection: close" in data.lower()
    assert data.count(b"HTTP/1.1") == 1, data  # nothing answered the smuggled GET


schemas = st.recursive(
    st.sampled_from(
        [
            {},
            {"type": "string"},
            {"type": "integer"},
            {"type": "null"},
            {"type": "boolean"},
            {"enum": []},
            {"const": 1},
            {"not": {}},
            SELF_REF,
            {"$ref": "#/nowhere"},
            {"type": "string", "minLength": 5, "maxLength": 2},
        ]
    )
    | st.builds(lambda p: {"type": "string", "pattern": p}, st.text(alphabet="()[]{}*+?|^$.\\ab1,-", max_size=16))
    | st.builds(lambda k: {"type": k}, st.text(max_size=8)),
    lambda c: (
        st.builds(
            lambda props, req: {"type": "object", "properties": props, "required": req},
            st.dictionaries(st.text("abc", min_size=1, max_size=2), c, max_size=3),
            st.lists(st.text("abc", min_size=1, max_size=2), max_size=2),
        )
        | st.builds(lambda i: {"type": "array", "items": i, "minItems": 1}, c)
        | st.builds(lambda xs: {"anyOf": xs}, st.lists(c, max_size=3))
    ),
    max_leaves=8,
)


@st.composite
def bodies(draw):
    body = dict(GOOD)
    kind = draw(st.sampled_from(["tools", "response_format", "both"]))
    if kind in ("tools", "both"):
        body["tools"] = tool(draw(schemas))
        body["tool_choice"] = draw(
            st.sampled_from(["required", "auto", "none", {"type": "function", "function": {"name": "f"}}])
        )
    if kind in ("response_format", "both"):
        body["response_format"] = draw(st.sampled_from([schema_format(draw(schemas)), {"type": "json_object"}]))
    text = json.dumps(body)
    if draw(st.booleans()):
        text = text.replace('"hi"', draw(st.sampled_from(['"\\udc80"', '"x\\ud800"', '"\\ud83d\\ude00"'])))
    return text.encode()


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies())
def test_no_body_with_tools_and_schemas_gets_a_5xx(server, body):
    r = post(server, body)
    assert r.status_code in (200, 400), (r.status_code, r.text[:300])
    if r.status_code == 400:
        assert r.json()["error"]["message"]
