"""A model named on a command line -> a local path: a directory or a ``.gguf`` file as is, or a Hugging Face id
(``Qwen/Qwen3-0.6B``).

An id is looked up in the local Hugging Face cache first; it is downloaded (only the files a Qwen3 model needs)
when the network is allowed (``HF_HUB_OFFLINE`` unset). Offline and absent, the error names the id and says how
to pass a local path. Every fs command that takes a model resolves it here.
"""

import os
from pathlib import Path

from .errors import WeightsError

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


def resolve_model_path(model: str, error: type[Exception] = WeightsError) -> Path:
    p = Path(model).expanduser()
    if p.is_dir() or (p.is_file() and p.suffix == ".gguf"):
        return p
    if p.exists() or model.startswith((".", "/", "~")) or model.count("/") != 1:
        raise error(
            f"{model}: no such model directory or .gguf file (and not a Hugging Face id like 'Qwen/Qwen3-0.6B')"
        )
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - declared dependency
        raise error("resolving a model id needs huggingface_hub; pass --model PATH instead") from None
    try:
        return Path(snapshot_download(model, allow_patterns=MODEL_FILES, local_files_only=True))
    except Exception as local_miss:
        if offline():
            raise error(
                f"model id {model!r} was not found in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
                f"download it where there is a network (`hf download {model}`) or pass --model PATH "
                f"to a local model directory"
            ) from local_miss
    try:
        return Path(snapshot_download(model, allow_patterns=MODEL_FILES))
    except Exception as e:
        raise error(
            f"could not download model id {model!r}: {type(e).__name__}: {e}; "
            "pass --model PATH to a local model directory"
        ) from None
