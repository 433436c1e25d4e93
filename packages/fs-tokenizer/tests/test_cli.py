import json

from fs_tokenizer.cli import main


def test_encode_shows_ids_and_readable_pieces(qwen3_dir, capsys):
    assert main(["encode", "--model", str(qwen3_dir), "Hello, world! 𝔘"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("9707 11 1879 0 ")
    assert any("Hello" in line for line in out) and any(line.endswith(" \\xf0\\x9d") for line in out)
    assert out[-1].endswith("tokens")


def test_decode_and_json(qwen3_dir, capsys):
    assert main(["decode", "--model", str(qwen3_dir), "9707", "11", "1879", "0"]) == 0
    assert capsys.readouterr().out == "Hello, world!\n"
    assert main(["encode", "--model", str(qwen3_dir / "tokenizer.json"), "--json", "hi"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ids": [6023], "pieces": ["hi"]}


def test_chat(tmp_path, qwen3_dir, capsys):
    (tmp_path / "m.json").write_text(json.dumps([{"role": "user", "content": "hi"}]))
    assert main(["chat", "--model", str(qwen3_dir), str(tmp_path / "m.json"), "--generation-prompt"]) == 0
    assert capsys.readouterr().out == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_errors_exit_2_without_traceback(tmp_path, qwen3_dir, capsys):
    assert main(["decode", "--model", str(qwen3_dir), "999999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fs-tokenizer: error: token id 999999 is out of range") and "Traceback" not in err
    (tmp_path / "m.json").write_text(json.dumps([{"content": "no role"}]))
    assert main(["chat", "--model", str(qwen3_dir), str(tmp_path / "m.json")]) == 2
    assert "no 'role'" in capsys.readouterr().err
    assert main(["encode", "--model", str(tmp_path), "x"]) == 2


def test_a_closed_pipe_ends_quietly_with_0(qwen3_dir, monkeypatch, capsys):
    """`fs-tokenizer encode ... | head -c1`: BrokenPipeError is an OSError, and must not become 'error', exit 2."""

    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("builtins.print", closed)
    assert main(["encode", "--model", str(qwen3_dir), "hi"]) == 0
