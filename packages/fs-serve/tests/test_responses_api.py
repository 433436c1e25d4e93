"""``POST /v1/responses`` through the official openai client: the same answer a chat completion gives for the
same conversation (one pipeline under both), the documented event sequence adding up to the non-streamed response,
function calls out and their outputs back in, reasoning items for ``<think>``, and a 400 naming each field fs
refuses."""

import json

import httpx
import jsonschema
import pytest

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}  # bounded
TOOL = {"type": "function", "name": "get_weather", "description": "Weather for a city", "parameters": WEATHER}
CHAT_TOOL = {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}


def test_a_response_is_the_chat_completion_of_the_same_conversation(server):
    c = server.client()
    r = c.responses.create(model="tiny", instructions="Be brief.", input="What is a list?", max_output_tokens=12,
                           temperature=0)  # fmt: skip
    chat = c.chat.completions.create(model="tiny", max_tokens=12, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a list?"}])  # fmt: skip
    msg = chat.choices[0].message
    got_reasoning = "".join(p.text for o in r.output if o.type == "reasoning" for p in o.content or [])
    assert r.output_text == (msg.content or "")
    assert got_reasoning == ((msg.model_extra or {}).get("reasoning_content") or "")
    assert (r.usage.input_tokens, r.usage.output_tokens) == (chat.usage.prompt_tokens, chat.usage.completion_tokens)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"  # 12 tokens: cut short
    assert r.id.startswith("resp_") and r.object == "response" and r.model == "tiny"


def test_the_event_stream_follows_the_documented_order_and_adds_up(server):
    c = server.client()
    kw = dict(model="tiny", input="Tell me about tuples.", max_output_tokens=16, temperature=0)
    whole = c.responses.create(**kw)
    with c.responses.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for item_kind, delta in (("message", "response.output_text.delta"),):
        i = kinds.index("response.output_item.added")
        assert events[i].item.type == item_kind and kinds[i + 1] == "response.content_part.added"
        assert kinds[i + 2] == delta
        text = "".join(e.delta for e in events if e.type == delta)
        assert text == whole.output_text == final.output_text
        assert kinds[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    # the response the last event carries is the non-streamed one (ids and times aside)
    shape = lambda r: (r.status, r.usage, [(o.type, o.status, [p.text for p in o.content]) for o in r.output])  # noqa: E731
    assert shape(final) == shape(whole)


def test_a_forced_call_comes_out_as_a_function_call_and_its_output_goes_back_in(server):
    c = server.client()
    r = c.responses.create(model="tiny", input="Weather in Paris?", tools=[TOOL], tool_choice="required",
                           max_output_tokens=80, temperature=0)  # fmt: skip
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    follow = [{"role": "user", "content": "Weather in Paris?"}, *[o.model_dump(exclude_none=True) for o in r.output],
              {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}]  # fmt: skip
    r2 = c.responses.create(model="tiny", input=follow, tools=[TOOL], max_output_tokens=4, temperature=0)
    chat = c.chat.completions.create(model="tiny", tools=[CHAT_TOOL], max_tokens=4, temperature=0, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "sunny, 21 C"}])  # fmt: skip
    assert r2.usage.input_tokens == chat.usage.prompt_tokens  # the same prompt: the same template rendering
    assert r2.output_text == (chat.choices[0].message.content or "")


def test_text_format_json_schema_constrains_the_answer(server):
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"]}
    fmt = {"format": {"type": "json_schema", "name": "a", "schema": schema}}
    r = server.client().responses.create(model="tiny", input="Is water wet?", max_output_tokens=40, text=fmt)
    assert json.loads(r.output_text) in ({"answer": "yes"}, {"answer": "no"}) and r.status == "completed"


def test_think_becomes_a_reasoning_item_and_a_tool_turn_has_no_empty_message(scripted):
    s, m, tok = scripted
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    m.prompt_len = len(tok.apply_chat_template(ask, add_generation_prompt=True, tokenize=True, tools=[CHAT_TOOL]))
    m.script = tok.encode('<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", '
                          '"arguments": {"city": "Paris"}}\n</tool_call>')  # fmt: skip
    c = s.client()
    for stream in (False, True):
        if stream:
            with c.responses.stream(model="tiny", input=ask, tools=[TOOL], max_output_tokens=64) as st:
                kinds = [e.type for e in st]
                r = st.get_final_response()
            assert "response.reasoning_text.delta" in kinds and "response.function_call_arguments.delta" in kinds
        else:
            r = c.responses.create(model="tiny", input=ask, tools=[TOOL], max_output_tokens=64)
        assert [o.type for o in r.output] == ["reasoning", "function_call"]
        assert r.output[0].content[0].text == "\nThe user wants weather.\n" and r.output[0].summary == []
        assert json.loads(r.output[1].arguments) == {"city": "Paris"} and r.status == "completed"
        assert r.usage.output_tokens_details.reasoning_tokens > 0


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"store": True}, "store"),
        ({"background": True}, "background"),
        ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),
        ({"include": ["file_search_call.results"]}, "include.0"),
        ({"conversation": "conv_1"}, "conversation"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
            "input.0.message.content.0",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0"),
        ({"max_tokens": 5}, "max_tokens"),  # chat's name: not a Responses field
        ({"model": "gpt-5"}, "model"),
    ],
)
def test_what_fs_does_not_do_is_a_400_naming_the_field(server, extra, param):
    r = httpx.post(f"{server.url}/v1/responses", json={"input": "hi", "max_output_tokens": 2} | extra, timeout=30)
    assert r.status_code in (400, 404) and r.json()["error"]["param"].startswith(param), r.text
