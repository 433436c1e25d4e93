import json

import pytest

from fs_generate.cli import main


def test_streams_and_ends_with_a_stats_line(tiny_dir, capsys):
    base = ["--model", str(tiny_dir), "--prompt", "Hello", "--max-tokens", "8", "--eos-token-id", "0"]
    assert main([*base, "--ignore-chat-template"]) == 0
    out, err = capsys.readouterr()
    assert out.endswith("\n")
    lines = err.strip().splitlines()
    assert lines[-3].startswith("Prompt: 1 tokens") and lines[-2].startswith("Generation: ")
    note = "(under 64 tokens: the first pass's one-time costs dominate; fs-bench -p measures prefill)"
    assert lines[-3].endswith(note)
    assert lines[-1].startswith("Peak memory: ") and lines[-1].endswith(" GB")


def test_the_chat_template_is_applied_by_default_as_in_mlx_lm(tiny_dir, capsys):
    from fs_tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tiny_dir)
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hello"}]
    want = len(tok.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=False, tokenize=True))
    for flag in ("--system-prompt", "--system"):  # mlx-lm's name, and fs's own
        assert main(["--model", str(tiny_dir), "-p", "Hello", flag, "be brief", "-m", "2", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["prompt_tokens"] == want
    assert main(["--model", str(tiny_dir), "--prompt", "Hello", "--raw", "-m", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prompt_tokens"] == 1
    assert main(["--model", str(tiny_dir), "-m", "2", "--json"]) == 0  # mlx-lm's default prompt, "hello"
    ids = tok.apply_chat_template([{"role": "user", "content": "hello"}], add_generation_prompt=True,
                                  enable_thinking=False, tokenize=True)  # fmt: skip
    assert json.loads(capsys.readouterr().out)["prompt_tokens"] == len(ids)


def test_extra_eos_token_stops_at_that_token(tiny_dir, capsys):
    args = ["--model", str(tiny_dir), "--prompt", "Hello", "--raw", "-m", "12", "--json"]
    assert main(args) == 0
    free = json.loads(capsys.readouterr().out)
    from fs_tokenizer import Tokenizer

    second = Tokenizer.from_pretrained(tiny_dir).decode([free["token_ids"][1]])
    assert main([*args, "--extra-eos-token", second]) == 0
    cut = json.loads(capsys.readouterr().out)
    assert cut["finish_reason"] == "eos" and cut["token_ids"] == free["token_ids"][: free["token_ids"].index(
        free["token_ids"][1])]  # fmt: skip


def test_version_is_the_package_version(capsys):
    import fs_generate

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"fs-generate {fs_generate.__version__}"


def test_json_chat_and_seed(tiny_dir, capsys):
    args = [
        "--model",
        str(tiny_dir),
        "--prompt",
        "hi",
        "--chat",
        "--system",
        "be brief",
        "--max-tokens",
        "5",
        "--temp",
        "0.7",
        "--seed",
        "3",
        "--json",
    ]
    assert main(args) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    b = json.loads(capsys.readouterr().out)
    assert a == b and a["prompt_tokens"] > 10 and a["finish_reason"] in ("length", "eos")


@pytest.mark.parametrize(
    "args,words",
    [
        (["--prompt", "", "--raw"], "empty prompt"),  # under the template an empty message is still a prompt
        (["--prompt", "x", "--temp", "-1"], "argument --temp: '-1' is not a finite non-negative number"),
        (["--prompt", "x", "--temp", "nan"], "argument --temp: 'nan' is not a finite non-negative number"),
        (["--prompt", "x", "--seed", "-1"], "argument --seed: '-1' is not a non-negative integer"),
        (["--prompt", "x", "--top-p", "0"], "top_p"),
        (["--prompt", "x", "--max-tokens", "-2"], "argument --max-tokens"),
        (["--prompt", "x", "--raw", "--system-prompt", "s"], "need the chat template"),
        (["--prompt", "x", "--raw", "--chat"], "contradict"),
        (["--prompt", "x", "--extra-eos-token", "not one token at all"], "is not one token"),
    ],
)
def test_bad_input_exits_2_without_traceback(tiny_dir, capsys, args, words):
    try:
        code = main(["--model", str(tiny_dir), *args])
    except SystemExit as e:  # argparse rejects a flag's value itself (its usual "prog: error: argument ...")
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_unknown_model_offline(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert main(["--model", "nobody/nothing", "--prompt", "x"]) == 2
    assert "'nobody/nothing' was not found in the local Hugging Face cache" in capsys.readouterr().err


def test_help_is_a_manual(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for words in ("--chat", "--top-p", "greedy", "exit codes", "--max-kv-size", "--repetition-penalty"):
        assert words in text


def test_constraint_flags(tiny_dir, tmp_path, capsys):
    schema = tmp_path / "schema.json"
    schema.write_text('{"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}, '
                      '"required": ["n"], "additionalProperties": false}')  # fmt: skip
    assert main(["--model", str(tiny_dir), "--prompt", "x", "--json-schema", str(schema), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["finish_reason"] == "stop" and 0 <= json.loads(got["text"])["n"] <= 9
    assert main(["--model", str(tiny_dir), "--prompt", "x", "--regex", "[ab]{3}", "--json", "--eos-token-id", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] in {a + b + c for a in "ab" for b in "ab" for c in "ab"}
    grammar = tmp_path / "g.lark"
    grammar.write_text('start: "on" | "off"\n')
    assert main(["--model", str(tiny_dir), "--prompt", "x", "--grammar", str(grammar), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] in ("on", "off")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--json-schema", "{bad"], "--json-schema: not a file and not JSON"),
        (["--grammar", "/no/such/file.lark"], "--grammar: /no/such/file.lark: file not found"),
        (["--grammar", "/dev/zero"], "--grammar: /dev/zero: is a FIFO, device or socket, not a regular file"),
        (["--regex", "a", "--json-schema", "{}"], "at most one of json_schema, regex and grammar"),
        (["--regex", "(unclosed"], "invalid regex"),
    ],
)
def test_bad_constraint_flags_fail_before_loading(flags, message, capsys):
    assert main(["--model", "/no/model/here", "--prompt", "x", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "loading" not in err


def test_the_tiny_model_note_keys_on_the_models_size_not_its_vocabulary(tiny_dir, tmp_path, capsys):
    """The tiny checkpoint has Qwen3's full 151,936-token vocabulary (the old rule, vocab < 1024, missed it); a
    quantized checkpoint counts its logical parameters (what fs-bench's table says too): 596M for a 4-bit 0.6B."""
    from fs_generate.model_flags import parameter_count
    from fs_weights import load_config, preset, write_random_checkpoint

    assert main(["--model", str(tiny_dir), "-p", "hi", "-m", "1"]) == 0
    err = capsys.readouterr().err
    assert "note: this is a tiny model (" in err and "M parameters)" in err
    q4 = write_random_checkpoint(tmp_path / "q4", preset("tiny"), dtype="float32", quantize=4, group_size=32)
    assert parameter_count(load_config(q4)) == parameter_count(preset("tiny"))
    assert parameter_count(preset("qwen3-0.6b")) == 596_049_920
