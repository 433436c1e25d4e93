"""What mlx-lm and llama.cpp users type: their flags and keywords with their meaning, or a refusal that says
what to do instead (docs/generate.md, "Coming from mlx-lm or llama.cpp")."""

import io
import json
import sys

import pytest

from fs_generate import GenerateError, generate, generate_batch, load, stream_generate
from fs_generate.cli import main


def _json(capsys, *args: str) -> dict:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_llama_cpp_spellings_mean_what_they_mean_there(tiny_dir, capsys):
    base = ["--model", str(tiny_dir), "--prompt", "Hello", "--raw", "--eos-token-id", "0"]
    want = _json(capsys, *base, "--max-tokens", "5")
    assert len(want["token_ids"]) == 5
    for flag in ("-m", "-n", "--n-predict"):  # mlx-lm's -m; llama.cpp's -n / --n-predict
        assert _json(capsys, *base, flag, "5")["token_ids"] == want["token_ids"]
    limited = _json(capsys, *base, "-m", "9", "-c", "4")  # llama.cpp's context size: prompt (1 token) included
    assert limited["token_ids"] == want["token_ids"][:3] and limited["finish_reason"] == "context"
    model_own = _json(capsys, *base, "-m", "5", "--ctx-size", "0", "-t", "1")  # -c 0: the model's own limit
    assert model_own["token_ids"] == want["token_ids"]
    endless = _json(capsys, *base, "-n", "-1", "-c", "7")  # llama.cpp's -n -1: until EOS or the context limit
    assert endless["token_ids"][:5] == want["token_ids"] and len(endless["token_ids"]) == 6
    assert endless["finish_reason"] == "context"


def test_a_model_path_after_dash_m_is_told_where_the_model_goes(capsys):
    with pytest.raises(SystemExit) as e:
        main(["-m", "Qwen3-0.6B-Q4_K_M.gguf", "--prompt", "hi"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "(a count of tokens); the model is --model Qwen3-0.6B-Q4_K_M.gguf (llama.cpp's -m)" in err


def test_adapter_path_loads_mlx_lms_adapter_on_every_command(tiny_dir, tmp_path, capsys):
    from fs_weights.random_adapter import write_random_adapter

    adapter = write_random_adapter(tiny_dir, tmp_path / "adapters", rank=4, num_layers=1)
    base = ["--model", str(tiny_dir), "--prompt", "Hello", "--raw", "--eos-token-id", "0", "-m", "6"]
    plain, adapted = _json(capsys, *base), _json(capsys, *base, "--adapter-path", str(adapter))
    model, tok = load(str(tiny_dir), adapter_path=str(adapter))
    want = generate(model, tok, tok.encode("Hello"), max_tokens=6, eos_token_ids=[0])
    assert adapted["token_ids"] == list(want.token_ids)  # the command's adapter is load(adapter_path=)'s
    assert adapted["token_ids"] != plain["token_ids"]  # and it changes what the model says


def test_a_bad_adapter_is_one_line_naming_the_file(tiny_dir, tmp_path, capsys):
    assert main(["--model", str(tiny_dir), "--adapter-path", str(tmp_path), "--prompt", "hi"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"fs-generate: error: {tmp_path}: no adapter_config.json; an adapter directory is what " + (
        "mlx_lm.lora or PEFT saves"
    )


def test_fs_bench_takes_llama_benchs_m_and_fs_generate_keeps_mlx_lms():
    from fs_generate.bench_cli import parser as bench
    from fs_generate.chat_cli import parser as chat
    from fs_generate.cli import parser as gen

    assert bench().parse_args(["-m", "x.gguf", "-t", "1,2"]).model == "x.gguf"
    args = gen().parse_args(["-m", "7", "-t", "2"])
    assert args.max_tokens == 7 and args.threads == 2 and args.model is None
    assert chat().parse_args(["-n", "7"]).max_tokens == 7


def test_fs_chat_passes_min_p_and_repetition_penalty_and_refuses_a_window(tiny_dir, monkeypatch, capsys):
    from fs_generate import chat_cli

    seen = {}

    class Recorder(chat_cli.ChatSession):
        def __init__(self, *a, **kw):
            seen.update(kw)
            super().__init__(*a, **kw)

    monkeypatch.setattr(chat_cli, "ChatSession", Recorder)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"/quit\n")))
    assert chat_cli.main(["--model", str(tiny_dir), "--min-p", "0.1", "--repetition-penalty", "1.3"]) == 0
    assert seen["min_p"] == 0.1 and seen["repetition_penalty"] == 1.3
    assert chat_cli.main(["--model", "/nonexistent", "--max-kv-size", "64"]) == 2  # refused before any loading
    assert "--max-kv-size: fs-chat carries the conversation's exact K/V" in capsys.readouterr().err


def test_fs_chat_says_so_for_an_unknown_command_and_sends_nothing(tiny_dir, monkeypatch, capsys):
    from fs_generate import chat_cli

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"/rest\n/think maybe\n/save ok.json\n")))
    monkeypatch.chdir(tiny_dir.parent)
    assert chat_cli.main(["--model", str(tiny_dir), "-m", "2"]) == 0
    out = capsys.readouterr().out
    assert "unknown command '/rest' (nothing was sent to the model)" in out
    assert "'/think maybe': not a form this command takes" in out
    assert "[saved 0 messages to ok.json]" in out  # the valid command after them still runs


@pytest.fixture(scope="module")
def demo():
    return load(None)


def test_mlx_lm_keywords_are_fs_keywords_under_their_names(demo):
    model, tok = demo
    want = generate(model, tok, "The with statement", max_new_tokens=6, temperature=0.8, seed=3)
    got = generate(model, tok, "The with statement", max_tokens=6, temp=0.8, seed=3)
    assert got.token_ids == want.token_ids and len(want.token_ids) == 6
    streamed = [s.token_id for s in stream_generate(model, tok, "The with statement", max_tokens=6, temp=0.8, seed=3)]
    assert streamed[:6] == want.token_ids
    assert (
        generate_batch(model, tok, ["The with statement"], max_tokens=6)[0].token_ids
        == generate(model, tok, "The with statement", max_new_tokens=6).token_ids
    )


@pytest.mark.parametrize(
    "kw, says",
    [
        (dict(max_tokens=3, verbose=True), "does not take mlx-lm's verbose=: fs returns a Generation"),
        (dict(max_tokens=3, sampler=3), "sampler must be a callable"),  # taken: user_hooks.py
        (dict(max_tokens=3, prompt_cache=[]), "fs's is prefix_cache="),
        (dict(max_tokens=3, max_new_tokens=3), "got both max_tokens= (mlx-lm's name) and max_new_tokens="),
        (dict(max_new_tokens=3, temprature=0.5), "unknown keyword 'temprature'; it takes: context_limit,"),
        ({}, "needs max_new_tokens= (mlx-lm's max_tokens=)"),
    ],
)
def test_keywords_fs_does_not_take_name_what_to_use(demo, kw, says):
    model, tok = demo
    for call in (generate, lambda *a, **k: list(stream_generate(*a, **k))):
        with pytest.raises(GenerateError) as e:
            call(model, tok, "hi", **kw)
        assert says in str(e.value) and "Generator" not in str(e.value)
