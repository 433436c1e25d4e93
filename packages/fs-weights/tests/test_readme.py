"""The README's quickstart runs as written (the package page a new user reads first)."""


def test_the_readme_examples_run(readme_examples):
    assert readme_examples("fs-weights") == 3
