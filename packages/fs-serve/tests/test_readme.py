"""The README's quickstart runs as written (the package page a new user reads first)."""


def test_the_readme_examples_run(readme_examples, demo_server):
    assert readme_examples("fs-serve", {"http://127.0.0.1:8080/v1": f"{demo_server.url}/v1"}) == 1
