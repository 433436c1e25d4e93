import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # shared test data modules (corpus.py) under --import-mode=importlib


@pytest.fixture(scope="session")
def qwen3_dir(qwen3_tokenizer_dir) -> Path:
    return qwen3_tokenizer_dir


@pytest.fixture(scope="session")
def qwen3(qwen3_dir):
    from fs_tokenizer import Tokenizer

    return Tokenizer.from_pretrained(qwen3_dir)


@pytest.fixture(scope="session")
def hf_qwen3(qwen3_dir):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(qwen3_dir / "tokenizer.json"))
