import importlib
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).parent))  # shared test data modules (corpus.py) under --import-mode=importlib


def _qwen3_dir() -> Path:
    for d in (os.environ.get("FS_QWEN3_TOKENIZER_DIR"), REPO.parent / "shared" / "qwen3-tokenizer"):
        if d and (Path(d) / "tokenizer.json").exists():
            return Path(d)
    pytest.skip(
        "Qwen3 tokenizer files not found: set FS_QWEN3_TOKENIZER_DIR to a directory holding Qwen3-0.6B's "
        "tokenizer.json and tokenizer_config.json (e.g. `hf download Qwen/Qwen3-0.6B tokenizer.json "
        "tokenizer_config.json --local-dir DIR`)"
    )


@pytest.fixture(scope="session")
def qwen3_dir() -> Path:
    return _qwen3_dir()


@pytest.fixture(scope="session")
def qwen3(qwen3_dir):
    from fs_tokenizer import Tokenizer

    return Tokenizer.from_pretrained(qwen3_dir)


@pytest.fixture(scope="session")
def hf_qwen3(qwen3_dir):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(qwen3_dir / "tokenizer.json"))


@pytest.fixture(scope="session")
def reference():
    def load(module: str):
        if os.environ.get("FS_REQUIRE_REFERENCE") == "1":
            return importlib.import_module(module)
        return pytest.importorskip(module, reason=f"{module} is the reference here; run `nox -s parity`")

    return load
