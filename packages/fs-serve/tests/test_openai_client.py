"""The server through the official openai client: every answer is what fs_generate.generate gives for the same
prompt after the template, streamed or not, with usage and log-probabilities right."""

import json

import jsonschema
import numpy as np
import pytest

from fs_generate import generate

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]


def rendered(tok, messages, **kw):
    return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kw)


def test_models_list(server):
    ids = [m.id for m in server.client().models.list()]
    assert ids == ["tiny"]


def test_greedy_chat_equals_generate_and_usage_counts_it(server, tiny):
    model, tok = tiny
    r = server.client().chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12, temperature=0)
    ids = rendered(tok, MESSAGES)
    want = generate(model, tok, ids, max_new_tokens=12)
    assert r.choices[0].message.content == want.text
    assert r.choices[0].finish_reason == {"length": "length", "eos": "stop"}[want.finish_reason]
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == len(want.token_ids)
    assert r.usage.total_tokens == len(ids) + len(want.token_ids)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "tiny"


def test_streamed_chat_concatenates_to_the_whole_answer(server):
    c = server.client()
    whole = c.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=16, temperature=0)
    chunks = list(
        c.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_plain_and_streamed_equal_generate(server, tiny):
    model, tok = tiny
    c = server.client()
    want = generate(model, tok, "The capital of", max_new_tokens=10)
    r = c.completions.create(model="tiny", prompt="The capital of", max_tokens=10, temperature=0)
    assert r.choices[0].text == want.text and r.object == "text_completion"
    streamed = c.completions.create(model="tiny", prompt="The capital of", max_tokens=10, temperature=0, stream=True)
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == want.text
    by_ids = c.completions.create(model="tiny", prompt=tok.encode("The capital of"), max_tokens=10, temperature=0)
    assert by_ids.choices[0].text == want.text


def test_seed_makes_sampling_reproducible_and_matches_generate(server, tiny):
    model, tok = tiny
    c = server.client()
    kw = dict(model="tiny", messages=MESSAGES, max_tokens=12, temperature=1.0, top_p=0.9)
    a = c.chat.completions.create(seed=7, **kw).choices[0].message.content
    b = c.chat.completions.create(seed=7, **kw).choices[0].message.content
    others = {c.chat.completions.create(seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert a == b
    assert len(others | {a}) > 1  # the seed is used, not ignored
    want = generate(model, tok, rendered(tok, MESSAGES), max_new_tokens=12, temperature=1.0, top_p=0.9, seed=7)
    assert a == want.text


def test_stop_strings_cut_the_text_in_both_forms(server, tiny):
    model, tok = tiny
    c = server.client()
    full = generate(model, tok, "Once upon", max_new_tokens=24).text
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    assert stop.strip(), full
    r = c.completions.create(model="tiny", prompt="Once upon", max_tokens=24, temperature=0, stop=[stop])
    assert r.choices[0].text == full[: full.index(stop)]
    assert r.choices[0].finish_reason == "stop"
    s = c.completions.create(model="tiny", prompt="Once upon", max_tokens=24, temperature=0, stop=[stop], stream=True)
    assert "".join(ch.choices[0].text for ch in s if ch.choices) == full[: full.index(stop)]


def test_logprobs_are_the_models_and_top_logprobs_are_sorted(server, tiny):
    model, tok = tiny
    r = server.client().chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
    )
    content = r.choices[0].logprobs.content
    want = generate(model, tok, rendered(tok, MESSAGES), max_new_tokens=6)
    assert len(content) == len(want.token_ids)
    np.testing.assert_allclose([e.logprob for e in content], want.logprobs, rtol=1e-6)
    for e, t in zip(content, want.token_ids, strict=True):
        assert bytes(e.bytes) == tok.token_bytes(t)
        tops = [x.logprob for x in e.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob)  # greedy: the chosen is the likeliest


def test_response_format_json_schema_output_validates(server):
    schema = {
        "type": "object",
        "properties": {"colour": {"enum": ["red", "green", "blue"]}, "shade": {"type": "integer", "minimum": 0}},
        "required": ["colour", "shade"],
        "additionalProperties": False,
    }
    c = server.client()
    for seed in range(3):
        r = c.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            max_tokens=60,
            temperature=1.0,
            seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        )
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
        assert r.choices[0].finish_reason == "stop"


def test_json_object_is_generate_under_the_object_schema(server, tiny):
    # a random model fills free-form keys until the budget ends, so the check is equality with the constrained
    # generate (whose outputs test_structured validates) and, where it closed the object, that it parses
    model, tok = tiny
    r = server.client().chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=40, temperature=0, response_format={"type": "json_object"}
    )
    want = generate(model, tok, rendered(tok, MESSAGES), max_new_tokens=40, json_schema={"type": "object"})
    text = r.choices[0].message.content
    assert text == want.text and text.startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_n_choices_are_seeded_apart(server, tiny):
    model, tok = tiny
    r = server.client().chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=8, temperature=1.0, seed=3, n=3
    )
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    ids = rendered(tok, MESSAGES)
    for j, ch in enumerate(r.choices):
        assert ch.message.content == generate(model, tok, ids, max_new_tokens=8, temperature=1.0, seed=3 + j).text
    assert r.usage.prompt_tokens == len(ids)  # the prompt counts once


def test_a_repeated_prompt_reports_cached_tokens(server, tiny):
    _, tok = tiny
    long = [{"role": "user", "content": "Tell me about the sea. " * 12}]
    c = server.client()
    c.chat.completions.create(model="tiny", messages=long, max_tokens=2, temperature=0)
    r = c.chat.completions.create(model="tiny", messages=long, max_tokens=2, temperature=0)
    n = len(rendered(tok, long))
    assert r.usage.prompt_tokens_details.cached_tokens == (n - 1) // 16 * 16  # whole blocks; the last token is fed


def test_null_fields_are_absent_and_a_model_is_retrieved_by_id(server):
    import httpx

    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "n": None,
            "stream": None, "temperature": None, "stop": None, "logprobs": None, "tools": None}  # fmt: skip
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200 and len(r.json()["choices"]) == 1, r.text
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2, "echo": None, "n": None},
                   timeout=60)  # fmt: skip
    assert r.status_code == 200, r.text
    assert server.client().models.retrieve("tiny").id == "tiny"
    missing = httpx.get(f"{server.url}/v1/models/gpt-4o")
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"


def test_served_model_aliases_are_accepted_and_listed(tiny):
    from serving import start

    s = start(*tiny, model_id="tiny", aliases=("qwen3-tiny",))
    try:
        c = s.client()
        assert [m.id for m in c.models.list()] == ["tiny", "qwen3-tiny"]
        r = c.chat.completions.create(model="qwen3-tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert r.model == "tiny"  # responses carry the first name, as vLLM's --served-model-name does
        assert c.models.retrieve("qwen3-tiny").id == "qwen3-tiny"
        import openai

        with pytest.raises(openai.NotFoundError, match="this server has 'tiny', 'qwen3-tiny'"):
            c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    finally:
        s.stop()
