import json

import pytest

from fs_generate.cli import main


def test_streams_and_ends_with_a_stats_line(tiny_dir, capsys):
    assert main(["--model", str(tiny_dir), "--prompt", "Hello", "--max-tokens", "8", "--eos-token-id", "0"]) == 0
    out, err = capsys.readouterr()
    assert out.endswith("\n")
    lines = err.strip().splitlines()
    assert lines[-3].startswith("Prompt: 1 tokens") and lines[-2].startswith("Generation: ")
    assert lines[-1].startswith("Peak memory: ") and lines[-1].endswith(" GB")


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
        (["--prompt", ""], "empty prompt"),
        (["--prompt", "x", "--temp", "-1"], "argument --temp: '-1' is not a finite non-negative number"),
        (["--prompt", "x", "--temp", "nan"], "argument --temp: 'nan' is not a finite non-negative number"),
        (["--prompt", "x", "--seed", "-1"], "argument --seed: '-1' is not a non-negative integer"),
        (["--prompt", "x", "--top-p", "0"], "top_p"),
        (["--prompt", "x", "--max-tokens", "-2"], "argument --max-tokens"),
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
        (["--grammar", "/no/such/file.lark"], "--grammar: cannot read /no/such/file.lark"),
        (["--regex", "a", "--grammar", "/dev/null"], "at most one of json_schema, regex and grammar"),
        (["--regex", "(unclosed"], "invalid regex"),
    ],
)
def test_bad_constraint_flags_fail_before_loading(flags, message, capsys):
    assert main(["--model", "/no/model/here", "--prompt", "x", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "loading" not in err
