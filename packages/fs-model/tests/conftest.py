import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # model_helpers.py under --import-mode=importlib
from fs_weights import write_random_checkpoint
from model_helpers import KNOBS, config


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """name -> float32 checkpoint dir, written once per session."""
    root = tmp_path_factory.mktemp("ckpt")
    return {n: write_random_checkpoint(root / n, config(n), seed=i, dtype="float32") for i, n in enumerate(KNOBS)}
