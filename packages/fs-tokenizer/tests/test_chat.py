import json

import pytest

from fs_tokenizer import Tokenizer, TokenizerError

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "e.g. 東京"}},
            "required": ["city"],
        },
    },
}
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}

CONVERSATIONS = {
    "user only": [{"role": "user", "content": "Hi!"}],
    "system + user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}],
    "multi-turn with thinking in history": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "<think>\nAgain.\n</think>\n\n6"},
        {"role": "user", "content": "Thanks"},
    ],
    "reasoning_content field": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": "because"},
        {"role": "user", "content": "q2"},
    ],
    "tool call and response": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": json.dumps({"temp_c": 18})},
        {"role": "tool", "content": "second result"},
        {"role": "assistant", "content": "It is 18°C."},
    ],
    "unicode and None keys": [{"role": "user", "content": "naïve 中文 😀", "name": None}],
}


@pytest.fixture(scope="module")
def hf_chat(qwen3_dir, reference):
    return reference("transformers").AutoTokenizer.from_pretrained(str(qwen3_dir))


@pytest.mark.parity
@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("gen", [False, True])
@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("tools", [None, [WEATHER]])
def test_byte_identical_to_transformers(qwen3, hf_chat, name, gen, thinking, tools):
    hf = hf_chat
    messages = CONVERSATIONS[name]
    kw = dict(add_generation_prompt=gen, enable_thinking=thinking, tools=tools)
    want = hf.apply_chat_template(messages, tokenize=False, **kw)
    assert qwen3.apply_chat_template(messages, **kw) == want
    assert qwen3.apply_chat_template(messages, tokenize=True, **kw) == hf.encode(want, add_special_tokens=False)


def test_generation_prompt_and_thinking_switch(qwen3):
    m = [{"role": "user", "content": "hi"}]
    assert qwen3.apply_chat_template(m) == "<|im_start|>user\nhi<|im_end|>\n"
    assert qwen3.apply_chat_template(m, add_generation_prompt=True).endswith("<|im_start|>assistant\n")
    assert qwen3.apply_chat_template(m, add_generation_prompt=True, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    ids = qwen3.apply_chat_template(m, tokenize=True)
    assert ids[0] == 151644 and ids[-2:] == [151645, 198]


@pytest.mark.parametrize(
    "messages,words",
    [
        ([], "non-empty list"),
        ([{"content": "x"}], "no 'role'"),
        ([{"role": "user"}], "no 'content'"),
        (["hello"], "expected a dict"),
    ],
)
def test_bad_messages(qwen3, messages, words):
    with pytest.raises(TokenizerError, match=words):
        qwen3.apply_chat_template(messages)


def test_template_raise_exception_and_environment(tmp_path, qwen3_dir):
    spec = json.loads((qwen3_dir / "tokenizer.json").read_text())
    config = {
        "eos_token": "<|im_end|>",
        "chat_template": (
            "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first message must be user') }}{% endif %}"
            "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}"
            "{{ ns.n }}|{{ eos_token }}|{{ {'k': 'é<'} | tojson }}|{{ dict(a=1) | tojson }}"
            "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}\n  {{ m.content }}{% endfor %}"
        ),
    }
    tok = Tokenizer(spec, config)
    assert tok.apply_chat_template([{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]) == (
        '2|<|im_end|>|{"k": "é<"}|{"a": 1}  x'
    )  # trim_blocks ate the newline after the tag
    with pytest.raises(TokenizerError, match="first message must be user"):
        tok.apply_chat_template([{"role": "system", "content": "x"}])
    bad = Tokenizer(spec, {"chat_template": "{% set ns = namespace() %}{% set ns._x = 1 %}"})
    with pytest.raises(TokenizerError, match="underscore"):
        bad.apply_chat_template([{"role": "user", "content": "x"}])
    with pytest.raises(TokenizerError, match="does not compile"):
        Tokenizer(spec, {"chat_template": "{% for %}"})
    with pytest.raises(TokenizerError, match="no chat_template"):
        Tokenizer(spec).apply_chat_template([{"role": "user", "content": "x"}])
