"""Where the tests find the real Qwen3 tokenizer files: a CI clone made outside the workspace must still find the
ones beside the checkout it was cloned from, or every test that needs them skips and CI proves much less."""

import subprocess


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def test_a_clone_finds_the_files_beside_the_checkout_it_was_cloned_from(tmp_path, qwen3_tokenizer_lookup):
    work = tmp_path / "work"
    files = work / "shared" / "qwen3-tokenizer"
    files.mkdir(parents=True)
    (files / "tokenizer.json").write_text("{}")
    repo = work / "main"
    repo.mkdir()
    _git("-C", str(repo), "init", "-q")
    _git("-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    clone = tmp_path / "elsewhere" / "ci"
    _git("clone", "-q", str(repo), str(clone))

    found = qwen3_tokenizer_lookup({}, clone)
    assert found[0] == tmp_path / "elsewhere" / "shared" / "qwen3-tokenizer"  # beside the clone: absent here
    assert files.resolve() in found

    env_dir = tmp_path / "mine"
    assert qwen3_tokenizer_lookup({"FS_QWEN3_TOKENIZER_DIR": str(env_dir)}, clone)[0] == env_dir  # the variable first


def test_a_checkout_that_is_not_a_clone_looks_only_beside_itself(tmp_path, qwen3_tokenizer_lookup):
    repo = tmp_path / "main"
    repo.mkdir()
    _git("-C", str(repo), "init", "-q")
    assert qwen3_tokenizer_lookup({}, repo) == [tmp_path / "shared" / "qwen3-tokenizer"]
