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
