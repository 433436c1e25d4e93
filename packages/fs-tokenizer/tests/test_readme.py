"""The README's quickstart runs as written (the package page a new user reads first)."""


def test_the_readme_examples_run(readme_examples, qwen3_tokenizer_dir):
    assert readme_examples("fs-tokenizer", {'"Qwen3-0.6B"': repr(str(qwen3_tokenizer_dir))}) == 3
