"""Qwen3's tool calls and reasoning, parsed whole and incrementally, and forced by a grammar.

Streamed in any split, the events must be the whole-text parse's, and no tag may leak into content or reasoning
(a parser that emits ``"<tool"`` before seeing ``"_call>"`` fails the split test). A call forced by
``tool_call_grammar`` must always parse and name one of the tools, with arguments valid for its schema.
"""

import itertools

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fs_generate import generate, load
from fs_generate.tool_calls import TAGS, OutputParser, ToolCall, parse_output, tool_call_grammar

TEXT = (
    "<think>\nThe user wants weather.\n</think>\n\nLet me check."
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": "{\\"tz\\": \\"CET\\"}"}\n</tool_call>'
)


def test_the_whole_text_parse():
    out = parse_output(TEXT)
    assert out.reasoning == "\nThe user wants weather.\n"
    assert out.content == "Let me check."
    assert [(c.name, c.arguments) for c in out.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"tz": "CET"}),
    ]
    assert out.tool_calls[0].arguments_json == '{"city":"Paris"}' and not out.invalid
    assert parse_output("plain <b>text</b> with a < sign").content == "plain <b>text</b> with a < sign"
    bad = parse_output('<tool_call>{"name": 3}</tool_call><tool_call>{"name": "x", "arguments": {}')
    assert bad.tool_calls == [] and bad.invalid == ['{"name": 3}', '{"name": "x", "arguments": {}']
    assert parse_output("thinking…</think>answer", in_reasoning=True).reasoning == "thinking…"


def events(parts, in_reasoning=False):
    p = OutputParser(in_reasoning)
    out = [e for part in parts for e in p.feed(part)] + list(p.close())
    merged = []  # adjacent text events of one kind are one stream
    for kind, v in out:
        if merged and kind in ("content", "reasoning") and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + v)
        else:
            merged.append((kind, v))
    return out, merged


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, len(TEXT)), max_size=12))
def test_any_split_streams_the_same_events_and_no_tag(cuts):
    bounds = [0, *sorted(cuts), len(TEXT)]
    raw, merged = events([TEXT[a:b] for a, b in itertools.pairwise(bounds)])
    _, whole = events([TEXT])
    assert merged == whole
    assert not any(t in v for kind, v in raw if kind in ("content", "reasoning") for t in TAGS)
    assert [v.name for k, v in raw if k == "tool_call"] == ["get_weather", "get_time"]


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12}}, "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["a", "b"], "additionalProperties": False}}},
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, qwen3_tokenizer_dir):
    from fs_weights import preset, write_random_checkpoint

    d = write_random_checkpoint(
        tmp_path_factory.mktemp("tools") / "m", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir
    )
    return load(str(d))


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_a_forced_tool_call_always_parses(tiny, seed):
    model, tok = tiny
    grammar = tool_call_grammar(TOOLS, tok.token_to_id("<tool_call>"), tok.token_to_id("</tool_call>"))
    kw = dict(temperature=0.9, seed=seed) if seed is not None else {}
    out = generate(model, tok, "Call a tool:", max_new_tokens=80, grammar=grammar, **kw)
    assert out.token_ids[0] == tok.token_to_id("<tool_call>")  # the added token, not text spelling it
    parsed = parse_output(out.text)
    assert len(parsed.tool_calls) == 1 and not parsed.invalid and parsed.content == ""
    call = parsed.tool_calls[0]
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.name)
    jsonschema.validate(call.arguments, schema)


def test_tool_call_grammar_refuses_bad_tools():
    with pytest.raises(ValueError, match="at least one tool"):
        tool_call_grammar([], 1, 2)
    with pytest.raises(ValueError, match="function name"):
        tool_call_grammar([{"function": {"parameters": {}}}], 1, 2)
    assert ToolCall("f", {"k": "ü"}, "").arguments_json == '{"k":"ü"}'  # compact, not ASCII-escaped


def test_without_tools_a_tool_call_block_is_content():
    p = OutputParser(tool_calls=False)
    out = [*p.feed(TEXT[:40]), *p.feed(TEXT[40:]), *p.close()]
    assert "".join(v for k, v in out if k == "content") == TEXT.split("</think>", 1)[1]
    assert {k for k, _ in out} == {"reasoning", "content"}
