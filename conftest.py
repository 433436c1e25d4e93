"""Fixtures every package's tests share (pytest loads this for any test under packages/)."""

import importlib
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def reference() -> Callable[[str], ModuleType]:
    """Import a reference library (mlx, mlx_lm, transformers); under `nox -s parity` (FS_REQUIRE_REFERENCE=1)
    its absence is a failure, elsewhere a skip that says where the test runs."""

    def load(module: str) -> ModuleType:
        if os.environ.get("FS_REQUIRE_REFERENCE") == "1":
            return importlib.import_module(module)
        return pytest.importorskip(module, reason=f"{module} is the reference here; run `nox -s parity`")

    return load


def _cloned_from(repo: Path) -> Path | None:
    """The checkout this one was cloned from, when that is a local directory (``git clone . /tmp/ci``), else None."""
    try:
        url = subprocess.run(
            ["git", "-C", str(repo), "remote", "get-url", "origin"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    url = url.removeprefix("file://")
    return Path(url).resolve() if url and Path(url).is_dir() else None


def qwen3_tokenizer_candidates(env: dict[str, str], repo: Path) -> list[Path]:
    """Where the real Qwen3 tokenizer files are looked for, in order: $FS_QWEN3_TOKENIZER_DIR, ../shared/qwen3-tokenizer
    beside this checkout, then beside the checkout it was cloned from. The last keeps a CI clone made elsewhere (the
    README's `git clone . /tmp/ci`) running the tests that need the files, instead of skipping them all quietly."""
    found = [Path(env["FS_QWEN3_TOKENIZER_DIR"])] if env.get("FS_QWEN3_TOKENIZER_DIR") else []
    found.append(repo.parent / "shared" / "qwen3-tokenizer")
    origin = _cloned_from(repo)
    if origin is not None:
        found.append(origin.parent / "shared" / "qwen3-tokenizer")
    return found


@pytest.fixture(scope="session")
def qwen3_tokenizer_lookup() -> Callable[[dict[str, str], Path], list[Path]]:
    """``qwen3_tokenizer_candidates`` itself (its test builds a checkout and a clone of it)."""
    return qwen3_tokenizer_candidates


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir() -> Path:
    """The real Qwen3 tokenizer files (``qwen3_tokenizer_candidates``); a skip that says how to get them elsewhere."""
    for d in qwen3_tokenizer_candidates(dict(os.environ), REPO):
        if (d / "tokenizer.json").exists():
            return d
    pytest.skip(
        "Qwen3 tokenizer files not found: set FS_QWEN3_TOKENIZER_DIR to a directory holding Qwen3-0.6B's "
        "tokenizer.json and tokenizer_config.json (e.g. `hf download Qwen/Qwen3-0.6B tokenizer.json "
        "tokenizer_config.json --local-dir DIR`)"
    )


@pytest.fixture
def readme_examples(tmp_path, monkeypatch) -> Callable[..., int]:
    """Run a package README's ```python blocks in order, in one namespace, in a temporary directory (what a reader
    pastes); ``replace`` swaps text first (a local path for a model id). Returns how many blocks ran."""

    def run(package: str, replace: dict[str, str] | None = None) -> int:
        text = (REPO / "packages" / package / "README.md").read_text(encoding="utf-8")
        blocks = re.findall(r"```python\n(.*?)```", text, re.S)
        monkeypatch.chdir(tmp_path)
        namespace: dict = {"__name__": "__readme__"}
        for block in blocks:
            for old, new in (replace or {}).items():
                block = block.replace(old, new)
            exec(compile(block, f"packages/{package}/README.md", "exec"), namespace)
        return len(blocks)

    return run


@pytest.fixture
def docs_examples(tmp_path, monkeypatch) -> Callable[..., int]:
    """Run docs/``page``'s ```python blocks in order, in one namespace, in a temporary directory, and check every
    claim they write as ``expression  # literal`` (``tok.encode("hi")  # [6023]``): the expression must equal the
    literal. ``replace`` swaps text first (a local path for a model id). Returns how many claims were checked."""
    import ast

    def claim(line: str) -> object:
        comment = line.split("  # ", 1)[1] if "  # " in line else ""
        for end in range(len(comment), 0, -1):  # the longest start of the comment that is a Python literal
            try:
                return ast.literal_eval(comment[:end].strip())
            except (ValueError, SyntaxError):
                continue
        return NO_CLAIM

    def run(page: str, replace: dict[str, str] | None = None) -> int:
        text = (REPO / "docs" / page).read_text(encoding="utf-8")
        monkeypatch.chdir(tmp_path)
        namespace: dict = {"__name__": "__docs__"}
        checked = 0
        for block in re.findall(r"```python\n(.*?)```", text, re.S):
            for old, new in (replace or {}).items():
                block = block.replace(old, new)
            lines = block.splitlines()
            for node in ast.parse(block).body:
                source = ast.get_source_segment(block, node) or ""
                want = claim(lines[node.end_lineno - 1]) if isinstance(node, ast.Expr) else NO_CLAIM
                if want is NO_CLAIM:
                    exec(compile(source, f"docs/{page}", "exec"), namespace)
                    continue
                got = eval(compile(source, f"docs/{page}", "eval"), namespace)
                assert got == want, f"docs/{page}: `{source}` is {got!r}, the page says {want!r}"
                checked += 1
        return checked

    return run


NO_CLAIM = object()


@pytest.fixture
def ring_hostfile(tmp_path) -> Callable[..., tuple[Path, list[int]]]:
    """An mx.distributed ring hostfile for ``n`` local ranks on free 127.0.0.1 ports (what mlx.launch writes), plus
    ``extra`` more free ports (a server's); -> (hostfile, extra ports). Spawn each rank with MLX_RANK=r and
    MLX_HOSTFILE=hostfile."""
    import json
    import socket

    def make(n: int = 2, extra: int = 0, directory: Path | None = None) -> tuple[Path, list[int]]:
        socks = [socket.socket() for _ in range(n + extra)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        ports = [s.getsockname()[1] for s in socks]
        for s in socks:
            s.close()
        hosts = (directory or tmp_path) / "hosts.json"
        hosts.write_text(json.dumps([[f"127.0.0.1:{p}"] for p in ports[:n]]))
        return hosts, ports[n:]

    return make
