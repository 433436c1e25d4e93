"""The README's quickstart runs as written (the package page a new user reads first)."""


def test_the_readme_examples_run(readme_examples, qwen3_tokenizer_dir):
    assert readme_examples("fs-tokenizer", {'"Qwen3-0.6B"': repr(str(qwen3_tokenizer_dir))}) == 3


def test_version_is_the_package_version(capsys):
    import pytest

    import fs_tokenizer
    from fs_tokenizer.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"fs-tokenizer {fs_tokenizer.__version__}"


def test_the_tokenizer_guides_example_says_what_the_tokenizer_does(docs_examples, qwen3_tokenizer_dir):
    """docs/tokenizer.md's ids, checked against the real Qwen3 tokenizer (a stale id in the guide fails here)."""
    assert docs_examples("tokenizer.md", {'"path/to/Qwen3-0.6B"': repr(str(qwen3_tokenizer_dir))}) == 4
