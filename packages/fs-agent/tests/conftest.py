import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # doubles.py under --import-mode=importlib
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir() -> Path:
    for d in (os.environ.get("FS_QWEN3_TOKENIZER_DIR"), REPO.parent / "shared" / "qwen3-tokenizer"):
        if d and (Path(d) / "tokenizer.json").exists():
            return Path(d)
    pytest.skip(
        "Qwen3 tokenizer files not found: set FS_QWEN3_TOKENIZER_DIR to a directory holding Qwen3-0.6B's "
        "tokenizer.json and tokenizer_config.json"
    )


@pytest.fixture(scope="session")
def reference():
    import importlib

    def load(module: str):
        if os.environ.get("FS_REQUIRE_REFERENCE") == "1":
            return importlib.import_module(module)
        return pytest.importorskip(module, reason=f"{module} is the reference here; run `nox -s parity`")

    return load
