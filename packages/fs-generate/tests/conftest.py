import importlib
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # toy.py under --import-mode=importlib
os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def reference():
    def load(module: str):
        if os.environ.get("FS_REQUIRE_REFERENCE") == "1":
            return importlib.import_module(module)
        return pytest.importorskip(module, reason=f"{module} is the reference here; run `nox -s parity`")

    return load


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
def tiny_dir(tmp_path_factory, qwen3_tokenizer_dir):
    """A tiny random Qwen3 (vocab 151936, untied) with the real tokenizer, float32."""
    from fs_weights import preset, write_random_checkpoint

    return write_random_checkpoint(
        tmp_path_factory.mktemp("gen") / "tiny",
        preset("tiny", tie_word_embeddings=False),
        dtype="float32",
        tokenizer=qwen3_tokenizer_dir,
        seed=1,
    )
