"""From what the user typed to a loaded (model, tokenizer): a local directory, or a Hugging Face model id.

An id is looked up in the local Hugging Face cache first; it is downloaded only when the network is allowed
(``HF_HUB_OFFLINE`` unset). Offline and absent, the error names the id and says how to pass a local path.
"""

import os
from pathlib import Path
from typing import Any

from fs_model import ModelError, load_model
from fs_tokenizer import Tokenizer, TokenizerError

from .demo import demo_model_path
from .errors import GenerateError

MODEL_FILES = [
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
]


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def resolve_model_path(model: str) -> Path:
    p = Path(model).expanduser()
    if p.is_dir():
        return p
    if p.exists() or model.startswith((".", "/", "~")) or model.count("/") != 1:
        raise GenerateError(f"{model}: no such model directory (and not a Hugging Face id like 'Qwen/Qwen3-0.6B')")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - declared dependency
        raise GenerateError("resolving a model id needs huggingface_hub; pass --model PATH instead") from None
    try:
        return Path(snapshot_download(model, allow_patterns=MODEL_FILES, local_files_only=True))
    except Exception as local_miss:
        if offline():
            raise GenerateError(
                f"model id {model!r} was not found in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
                f"download it where there is a network (`hf download {model}`) or pass --model PATH "
                f"to a local model directory"
            ) from local_miss
    try:
        return Path(snapshot_download(model, allow_patterns=MODEL_FILES))
    except Exception as e:
        raise GenerateError(
            f"could not download model id {model!r}: {type(e).__name__}: {e}; "
            "pass --model PATH to a local model directory"
        ) from None


def load(
    model: str | None,
    *,
    backend: str = "numpy",
    dtype: str | None = None,
    quantize: str | None = None,
    progress: Any = None,
) -> tuple[Any, Tokenizer]:
    """``model=None`` loads the demo model shipped with fs-generate."""
    path = demo_model_path() if model is None else resolve_model_path(model)
    try:
        tok = Tokenizer.from_pretrained(path)
        return load_model(path, backend=backend, dtype=dtype, quantize=quantize, progress=progress), tok
    except (ModelError, TokenizerError) as e:
        raise GenerateError(str(e)) from None
