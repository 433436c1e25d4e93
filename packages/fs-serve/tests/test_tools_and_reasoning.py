"""Qwen3's tool calls and thinking through the server: a scripted model emits the text, the client gets
``tool_calls`` / ``reasoning_content`` (never the tags in ``content``), streamed or not; a required call is forced
by constrained decoding on a model that would never write one by itself."""

import json

import pytest

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
BOUNDED = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}},
    "required": ["city"],
    "additionalProperties": False,
}
OTHER = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"const": "UTC"}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}


def script(m, tok, messages, text, **kw):
    m.prompt_len = len(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kw))
    m.script = tok.encode(text)


def test_a_tool_call_becomes_tool_calls_streamed_or_not(scripted):
    s, m, tok = scripted
    script(m, tok, ASK, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
           tools=TOOLS)  # fmt: skip
    c = s.client()
    r = c.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, max_tokens=64, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content is None
    (call,) = ch.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    chunks = list(
        c.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, max_tokens=64, temperature=0, stream=True)
    )
    content = "".join(x.choices[0].delta.content or "" for x in chunks)
    calls = [tc for x in chunks for tc in (x.choices[0].delta.tool_calls or [])]
    assert "<tool_call>" not in content and content.strip() == ""
    assert [(tc.index, tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
        (0, "get_weather", {"city": "Paris"})
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_the_tool_result_goes_back_through_the_template(scripted):
    s, m, tok = scripted
    turn = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    ]
    seen = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}  # what Qwen3's template reads
    as_template_sees_it = [*ASK, {**turn[1], "tool_calls": [seen]}, turn[2]]
    script(m, tok, as_template_sees_it, "It is sunny.", tools=TOOLS)
    r = s.client().chat.completions.create(model="tiny", messages=turn, tools=TOOLS, max_tokens=16, temperature=0)
    assert r.choices[0].message.content == "It is sunny."  # the script started exactly where the prompt ended
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens == m.prompt_len


def test_thinking_goes_to_reasoning_content(scripted):
    s, m, tok = scripted
    script(m, tok, ASK, "<think>\nThe user wants weather.\n</think>\n\nAsk a forecaster.")
    c = s.client()
    r = c.chat.completions.create(model="tiny", messages=ASK, max_tokens=40, temperature=0)
    msg = r.choices[0].message
    assert msg.content == "\n\nAsk a forecaster."
    assert msg.model_extra["reasoning_content"] == "\nThe user wants weather.\n"
    chunks = list(c.chat.completions.create(model="tiny", messages=ASK, max_tokens=40, temperature=0, stream=True))
    deltas = [x.choices[0].delta for x in chunks]
    assert "".join(d.content or "" for d in deltas) == msg.content
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    assert reasoning == "\nThe user wants weather.\n"


def test_without_tools_a_tool_call_is_plain_content(scripted):
    s, m, tok = scripted
    text = '<tool_call>\n{"name": "x", "arguments": {}}\n</tool_call>'
    script(m, tok, ASK, text)
    r = s.client().chat.completions.create(model="tiny", messages=ASK, max_tokens=40, temperature=0)
    assert r.choices[0].message.content == text and r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_required_tool_call_is_forced_on_a_random_model(server, choice):
    # a random model writes a free string forever, so the city is an enum here: the call must then complete
    tools = [{"type": "function", "function": {**TOOLS[0]["function"], "parameters": BOUNDED}}, OTHER]
    c = server.client()
    for seed in range(3):
        r = c.chat.completions.create(
            model="tiny", messages=ASK, tools=tools, tool_choice=choice, max_tokens=64, temperature=1.0, seed=seed
        )
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch.message
        (call,) = ch.message.tool_calls
        if choice != "required":
            assert call.function.name == "get_weather"
        args = json.loads(call.function.arguments)
        assert call.function.name in ("get_weather", "get_time")
        assert args in ({"city": "Paris"}, {"city": "Rome"}, {"zone": "UTC"})


def test_ignore_eos_runs_to_max_tokens(scripted):
    s, m, tok = scripted
    script(m, tok, ASK, "Hi")  # then EOS, every step
    c = s.client()
    r = c.chat.completions.create(model="tiny", messages=ASK, max_tokens=6, temperature=0)
    assert (r.choices[0].message.content, r.usage.completion_tokens, r.choices[0].finish_reason) == ("Hi", 1, "stop")
    r = c.chat.completions.create(
        model="tiny", messages=ASK, max_tokens=6, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.usage.completion_tokens == 6 and r.choices[0].finish_reason == "length"


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_cut_by_the_budget_is_still_a_tool_call(server, stream):
    """A free string on a random model runs past 12 tokens: the client gets the call as far as it got, with
    finish_reason "length", never <tool_call> text in content (what langchain and the Agents SDK would choke on)."""
    c = server.client()
    kw = dict(model="tiny", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=12, temperature=0)
    if not stream:
        ch = c.chat.completions.create(**kw).choices[0]
        content, calls, finish = ch.message.content, ch.message.tool_calls, ch.finish_reason
        names, arguments = [t.function.name for t in calls or []], "".join(t.function.arguments for t in calls or [])
    else:
        content, names, arguments, finish = "", [], "", None
        for chunk in c.chat.completions.create(**kw, stream=True):
            d = chunk.choices[0].delta
            content += d.content or ""
            for t in d.tool_calls or []:
                names += [t.function.name] if t.function.name else []
                arguments += t.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "length" and not content and "<tool_call>" not in (content or "")
    assert len(names) == 1 and names[0] in ("get_weather", "get_time") and arguments.startswith("{")
