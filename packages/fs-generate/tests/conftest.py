import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # toy.py under --import-mode=importlib
os.environ.setdefault("HF_HUB_OFFLINE", "1")


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
