"""The README's quickstart runs as written (the package page a new user reads first)."""


def test_the_readme_examples_run(readme_examples):
    assert readme_examples("fs-weights") == 3


def test_the_weights_guides_example_runs_and_says_what_it_shows(docs_examples):
    """docs/weights.md's worked example as a reader pastes it; its cross-check verdict is checked."""
    assert docs_examples("weights.md") == 1
