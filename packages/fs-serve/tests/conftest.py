"""A real server for the tests: uvicorn on a free loopback port in a thread, on a tiny random Qwen3 with the real
Qwen3 tokenizer (its chat template renders tools), stopped when the test module ends."""

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # serving.py under --import-mode=importlib
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from serving import Scripted, Server, start


@pytest.fixture(scope="session")
def tiny(tmp_path_factory, qwen3_tokenizer_dir) -> tuple[Any, Any]:
    from fs_model import load_model
    from fs_tokenizer import Tokenizer
    from fs_weights import preset, write_random_checkpoint

    d = write_random_checkpoint(
        tmp_path_factory.mktemp("serve") / "tiny", preset("tiny"), dtype="float32", tokenizer=qwen3_tokenizer_dir
    )
    return load_model(Path(d)), Tokenizer.from_pretrained(d)


@pytest.fixture(scope="module")
def server(tiny) -> Iterator[Server]:
    s = start(*tiny)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def demo_server() -> Iterator[Server]:
    from fs_generate import load

    s = start(*load(None), model_id="fs-demo")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def scripted(tiny) -> Iterator[tuple[Server, Scripted, Any]]:
    """A server on the tiny model whose output the test scripts (``Scripted``): tool calls, thinking."""
    model, tok = tiny
    m = Scripted(model, tok.token_to_id("<|im_end|>"))
    s = start(m, tok, model_id="tiny")
    yield s, m, tok
    s.stop()
