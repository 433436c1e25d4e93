"""Hostile and careless tokenizer files, chat templates and CLI input: each is one ``TokenizerError`` naming the
file, the field or the template line (or a clean ``fs-tokenizer: error:`` line), never a traceback or a hang."""

import contextlib
import json
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fs_tokenizer import Tokenizer, TokenizerError
from test_errors import BASE  # the same minimal tokenizer.json

DEEP = "[" * 100_000 + "]" * 100_000
USER = [{"role": "user", "content": "hi"}]


def model_dir(tmp_path, spec=BASE, config=None):
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    if config is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config) if not isinstance(config, str) else config)
    return tmp_path


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "generation_config.json"])
def test_deeply_nested_json_names_the_file(tmp_path, name):
    model_dir(tmp_path)
    (tmp_path / name).write_text(DEEP)
    with pytest.raises(TokenizerError, match=f"{name}: JSON nested too deeply"):
        Tokenizer.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "change,words",
    [
        ({"decoder": "ByteLevel"}, "decoder must be an object, got str"),
        ({"normalizer": "NFC"}, "normalizer: must be an object with a 'type', got str"),
        ({"pre_tokenizer": [{"type": "ByteLevel"}]}, "pre_tokenizer: must be an object with a 'type', got list"),
        ({"normalizer": {"type": "Sequence"}}, "normalizer: Sequence without a 'normalizers' list"),
        ({"normalizer": {"type": "Sequence", "normalizers": [5]}}, r"normalizer.normalizers\[0\]: must be an object"),
        ({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [5]}}, r"model.merges\[0\] must be 'a b'"),
        ({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": "a b"}}, "model.merges must be a list, got str"),
        ({"model": {"type": "BPE", "vocab": {"a": "0"}}}, r"model.vocab\['a'\] must be a non-negative int id"),
        ({"model": []}, "'model' is missing or not an object"),
        ({"added_tokens": [{"id": 4, "content": "x", "special": "yes"}]}, r"added_tokens\[0\]: flags"),
        (
            {"pre_tokenizer": {"type": "Split", "pattern": "a", "behavior": "Isolated"}},
            "Split 'pattern' must be",
        ),
    ],
)
def test_wrong_field_types_name_the_field_and_file(tmp_path, change, words):
    with pytest.raises(TokenizerError, match=words) as e:
        Tokenizer.from_pretrained(model_dir(tmp_path, BASE | change))
    assert "tokenizer.json" in str(e.value)


def test_a_normalizer_sequence_nested_past_the_recursion_limit(tmp_path):
    spec: dict = {"type": "NFC"}
    for _ in range(5000):
        spec = {"type": "Sequence", "normalizers": [spec]}
    text = '{"type": "Sequence", "normalizers": [' * 5000 + '{"type": "NFC"}' + "]}" * 5000
    (tmp_path / "tokenizer.json").write_text(json.dumps(BASE)[:-1] + ', "normalizer": ' + text + "}")
    with pytest.raises(TokenizerError, match="tokenizer.json: JSON nested too deeply"):
        Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(TokenizerError, match="nested too deeply"):
        Tokenizer(BASE | {"normalizer": spec}, source="spec")  # built in memory: our own walk is guarded too


@pytest.mark.parametrize(
    "config,words",
    [
        ("[1, 2]", "tokenizer_config.json: the top level must be a JSON dict, got list"),
        ({"chat_template": 5}, "'chat_template' must be a string, got int"),
        ({"chat_template": "{% for %}"}, r"chat_template does not compile: .* \(line 1\)"),
    ],
)
def test_bad_tokenizer_config(tmp_path, config, words):
    with pytest.raises(TokenizerError, match=words):
        Tokenizer.from_pretrained(model_dir(tmp_path, config=config))


@pytest.mark.parametrize(
    "template,words",
    [
        ("x\n{{ 1/0 }}", "chat template failed at line 2: ZeroDivisionError"),
        ("{% for i in range(10**9) %}x{% endfor %}", "range of 1000000000 items"),
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
        ("{{ 'a' * 10**10 }}", "repetition to 10000000000 items"),
        ("{{ [1] * 10**9 }}", "repetition to 1000000000 items"),
        ("{{ 2 ** 100000 }}", "exponent 100000 is too large"),
        ("{% for i in range(9999) %}{% for j in range(9999) %}{% endfor %}{% endfor %}", "exceeded its budget"),
        ("{{ raise_exception('nope') }}", "rejected the messages at line 1: nope"),
        ("{{ messages.__class__.__mro__ }}", "stopped|rejected|failed"),  # the sandbox still refuses attributes
    ],
)
def test_templates_that_fail_at_render_time_are_tokenizer_errors(tmp_path, template, words):
    tok = Tokenizer.from_pretrained(model_dir(tmp_path, config={"chat_template": template}))
    t0 = time.perf_counter()
    with pytest.raises(TokenizerError, match=words):
        tok.apply_chat_template(USER)
    assert time.perf_counter() - t0 < 20  # bounded: the budget, not the machine, ends a runaway template


def test_a_template_that_is_fine_still_renders(tmp_path):
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{{ range(3) | list }}"
    tok = Tokenizer.from_pretrained(model_dir(tmp_path, config={"chat_template": template}))
    assert tok.apply_chat_template(USER) == "<user>hi[0, 1, 2]"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: (
            st.lists(c, max_size=3)
            | st.dictionaries(
                st.sampled_from(["type", "normalizers", "pretokenizers", "pattern", "Regex"]), c, max_size=3
            )
        ),
        max_leaves=12,
    )
)
def test_any_json_in_the_pipeline_fields_is_a_tokenizer_error_or_a_tokenizer(value):
    for key in ("normalizer", "pre_tokenizer", "decoder", "added_tokens"):
        try:
            Tokenizer(BASE | {key: value}, source="fuzz")
        except TokenizerError as e:
            assert str(e).startswith("fuzz: ")


def cli(*args, stdin=b""):
    return subprocess.run(
        [sys.executable, "-m", "fs_tokenizer.cli", *args], input=stdin, capture_output=True, timeout=120
    )


def test_cli_messages_files(tmp_path, qwen3_dir):
    bad = {"deep.json": DEEP.encode(), "latin1.json": b'[{"role": "user", "content": "caf\xe9"}]', "obj.json": b"{}"}
    words = {
        "deep.json": b"JSON nested too deeply",
        "latin1.json": b"not valid UTF-8 (byte offset 33)",
        "obj.json": b"the top level must be a JSON list",
    }
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
        done = cli("chat", str(tmp_path / name), "--model", str(qwen3_dir))
        assert done.returncode == 2 and done.stderr.startswith(b"fs-tokenizer: error: ") and words[name] in done.stderr
        assert b"Traceback" not in done.stderr
    done = cli("encode", "-", "--model", str(qwen3_dir), stdin=b"\xff")
    assert done.returncode == 2 and b"<stdin>: not valid UTF-8 (byte offset 0)" in done.stderr


def test_cli_closed_pipe_is_quiet(qwen3_dir):
    done = subprocess.run(
        f"{sys.executable} -m fs_tokenizer.cli encode '{'hello ' * 500}' --model {qwen3_dir} | head -c1",
        shell=True,
        capture_output=True,
        timeout=120,
    )
    assert done.stderr == b"" and len(done.stdout) == 1


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(["name", "template", "content", "x"]), c),
    max_leaves=6,
)
CONFIG_KEYS = ["chat_template", "eos_token", "bos_token", "pad_token", "added_tokens_decoder", "model_max_length"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(CONFIG_KEYS), value=JSON_VALUES, gen=JSON_VALUES)
@example(key="chat_template", value=[{"name": []}], gen=None)  # found in CI: an unhashable template name
def test_any_tokenizer_config_value_loads_or_is_a_tokenizer_error(tmp_path, key, value, gen):
    model_dir(tmp_path, config={key: value})
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": gen}))
    try:
        tok = Tokenizer.from_pretrained(tmp_path)
    except TokenizerError:
        return
    if tok.chat_template is not None:
        with contextlib.suppress(TokenizerError):
            tok.apply_chat_template(USER)


@pytest.mark.parametrize("ids", [None, 5, 2.5, "ab", b"ab"])
def test_decode_of_something_that_is_not_a_sequence_of_ids(tmp_path, ids):
    tok = Tokenizer.from_pretrained(model_dir(tmp_path))
    with pytest.raises(TokenizerError, match="decode takes a sequence of token ids, got"):
        tok.decode(ids)
