import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest

from fs_weights import Qwen3Config

REPO = Path(__file__).resolve().parents[3]


def _reference(module: str) -> ModuleType:
    """Import a reference library; in `nox -s parity` (FS_REQUIRE_REFERENCE=1) its absence is a failure."""
    if os.environ.get("FS_REQUIRE_REFERENCE") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is the reference here; run `nox -s parity`")


def _qwen3_tokenizer_dir() -> Path:
    for d in (os.environ.get("FS_QWEN3_TOKENIZER_DIR"), REPO.parent / "shared" / "qwen3-tokenizer"):
        if d and (Path(d) / "tokenizer.json").exists():
            return Path(d)
    pytest.skip(
        "Qwen3 tokenizer files not found: set FS_QWEN3_TOKENIZER_DIR to a directory holding Qwen3-0.6B's "
        "tokenizer.json/tokenizer_config.json (e.g. from huggingface.co/Qwen/Qwen3-0.6B)"
    )


@pytest.fixture
def tiny() -> Qwen3Config:
    return Qwen3Config.from_dict(
        dict(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            max_position_embeddings=256,
            tie_word_embeddings=False,
        )
    )


@pytest.fixture
def reference():
    return _reference


@pytest.fixture
def qwen3_tokenizer_dir() -> Path:
    return _qwen3_tokenizer_dir()
