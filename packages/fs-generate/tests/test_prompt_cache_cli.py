"""fs-cache-prompt + fs-generate --prompt-cache-file (mlx-lm's pair): the cached prompt is prefilled once, the
later prompt continues it, and the output equals generating from the joined ids with no file at all."""

import json

import pytest

from fs_generate import generate, load
from fs_generate.cache_prompt import main as cache_main
from fs_generate.chat_prompt import open_turn, rest_of_turn
from fs_generate.cli import main as generate_main

DOC = "The report covers three quarters of sales in four regions. " * 6


def test_the_cached_prompt_is_reused_and_the_output_equals_no_cache(tiny_dir, tmp_path, capsys):
    f = tmp_path / "doc.safetensors"
    assert cache_main(["--model", str(tiny_dir), "--prompt", DOC, "--system-prompt", "be brief", "--out", str(f)]) == 0
    assert "saved" in capsys.readouterr().err
    assert generate_main(["--model", str(tiny_dir), "--prompt-cache-file", str(f), "-p", " Summarize.", "-m", "12",
                          "--json"]) == 0  # fmt: skip
    got = json.loads(capsys.readouterr().out)
    model, tok = load(str(tiny_dir))
    cached = open_turn(tok, DOC, "be brief")
    ids = cached + rest_of_turn(tok, " Summarize.")
    want = generate(model, tok, ids, max_new_tokens=12)
    assert got["cached_tokens"] == len(cached) and got["prompt_tokens"] == len(ids)
    assert got["token_ids"] == want.token_ids
    # the user message reads as one: the template's rendering of DOC + " Summarize." up to the assistant header
    joined = tok.apply_chat_template(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": DOC + " Summarize."}],
        add_generation_prompt=True, enable_thinking=False,
    )  # fmt: skip
    assert tok.decode(ids) == joined


def test_raw_prompts_are_joined_without_the_template(tiny_dir, tmp_path, capsys):
    f = tmp_path / "raw.safetensors"
    assert cache_main(["--model", str(tiny_dir), "-p", "def fibonacci(n):", "--raw", "--out", str(f)]) == 0
    assert generate_main(["--model", str(tiny_dir), "--prompt-cache-file", str(f), "-p", "\n    ", "--raw", "-m", "6",
                          "--json"]) == 0  # fmt: skip
    got = json.loads(capsys.readouterr().out)
    model, tok = load(str(tiny_dir))
    ids = tok.encode("def fibonacci(n):") + tok.encode("\n    ")
    assert got["token_ids"] == generate(model, tok, ids, max_new_tokens=6).token_ids


def test_a_file_made_with_other_weights_is_refused(tiny_dir, tmp_path, qwen3_tokenizer_dir, capsys):
    from fs_weights import preset, write_random_checkpoint

    other = write_random_checkpoint(tmp_path / "other", preset("tiny", tie_word_embeddings=False), dtype="float32",
                                    tokenizer=qwen3_tokenizer_dir, seed=2)  # fmt: skip
    f = tmp_path / "doc.safetensors"
    assert cache_main(["--model", str(other), "-p", DOC, "--out", str(f)]) == 0
    capsys.readouterr()
    assert generate_main(["--model", str(tiny_dir), "--prompt-cache-file", str(f), "-p", "x"]) == 2
    err = capsys.readouterr().err
    assert "made with other weights; refusing to load it" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["fs-generate", "--prompt-cache-file", "/nonexistent.safetensors"], "no such file"),
        (["fs-generate", "--prompt-cache-file", "{f}", "--system-prompt", "s"], "belongs to the cached prompt"),
        (["fs-cache-prompt", "-p", "x", "--out", "/nonexistent/dir/p.safetensors"], "no such directory"),
        (["fs-cache-prompt", "-p", "x", "--out", "{f}", "--raw", "--system", "s"], "needs the chat template"),
    ],
)
def test_bad_flags_fail_before_the_model_loads(argv, words, tmp_path, capsys):
    f = tmp_path / "p.safetensors"
    f.write_bytes(b"")
    run = generate_main if argv[0] == "fs-generate" else cache_main
    assert run(["--model", str(tmp_path / "no-model"), *[a.format(f=f) for a in argv[1:]]]) == 2
    err = capsys.readouterr().err
    assert words in err and "loading" not in err


def test_fs_cache_prompt_version(capsys):
    import fs_generate

    with pytest.raises(SystemExit) as e:
        cache_main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"fs-cache-prompt {fs_generate.__version__}"


@pytest.mark.parity
def test_the_mlx_backend_reads_the_same_file(tiny_dir, tmp_path, capsys, reference):
    reference("mlx.core")
    f = tmp_path / "doc.safetensors"
    assert cache_main(["--model", str(tiny_dir), "--backend", "mlx", "-p", DOC, "--out", str(f)]) == 0
    argv = ["--model", str(tiny_dir), "--backend", "mlx", "-p", " Summarize.", "-m", "8", "--json"]
    assert generate_main([*argv, "--prompt-cache-file", str(f)]) == 0
    got = json.loads(capsys.readouterr().out)
    model, tok = load(str(tiny_dir), backend="mlx")
    ids = open_turn(tok, DOC) + rest_of_turn(tok, " Summarize.")
    assert got["cached_tokens"] > 0 and got["token_ids"] == generate(model, tok, ids, max_new_tokens=8).token_ids
    assert generate_main([*argv[:2], "-p", "x", "--prompt-cache-file", str(f)]) == 2  # numpy's K/V dtype differs
    assert "refusing" in capsys.readouterr().err
