"""From what the user typed to a loaded (model, tokenizer): a local directory, or a Hugging Face model id
(resolved by ``fs_weights.hub``: the local cache first, a download only when the network is allowed)."""

from pathlib import Path
from typing import Any

from fs_model import ModelError, load_model
from fs_tokenizer import Tokenizer, TokenizerError
from fs_weights import WeightsError, hub

from .demo import DEMO_DTYPE, demo_model_path
from .errors import GenerateError


def resolve_model_path(model: str) -> Path:
    """A local directory as is; a Hugging Face id through the local cache (or a download when online)."""
    return hub.resolve_model_path(model, GenerateError)


def load(
    model: str | None,
    *,
    backend: str = "numpy",
    dtype: str | None = None,
    quantize: str | None = None,
    progress: Any = None,
    tensor_group: Any = None,
    adapter_path: str | None = None,
) -> tuple[Any, Tokenizer]:
    """``model=None`` loads the demo model shipped with fs-generate (on the numpy backend as ``DEMO_DTYPE``
    unless ``dtype`` or ``quantize`` says otherwise); ``tensor_group``: an ``mx.distributed`` group this process is
    one rank of (MLX backend: it loads and runs its slice, ``fs_model.mlx.shard``); ``adapter_path``: a LoRA adapter
    directory fused in at load (``fs_model.load_model``)."""
    path = demo_model_path() if model is None else resolve_model_path(model)
    if model is None and backend == "numpy" and dtype is None and quantize is None:
        dtype = DEMO_DTYPE
    try:
        tok = _gguf_tokenizer(path) if path.suffix == ".gguf" else Tokenizer.from_pretrained(path)
        return (
            load_model(
                path,
                backend=backend,
                dtype=dtype,
                quantize=quantize,
                progress=progress,
                tensor_group=tensor_group,
                adapter_path=adapter_path,
            ),
            tok,
        )
    except (ModelError, TokenizerError) as e:
        raise GenerateError(str(e)) from None


def _gguf_tokenizer(path: Path) -> Tokenizer:
    """The vocabulary inside the GGUF file, or the tokenizer.json beside it when the file carries none."""
    from fs_weights.gguf_file import GGUFFile, gguf_config

    try:
        f = GGUFFile(path)
        try:
            gguf_config(f)  # a llama or another architecture is refused for what it is, before its vocabulary
        finally:
            f.close()
        meta = f.metadata
    except WeightsError as e:
        raise GenerateError(str(e)) from None
    if "tokenizer.ggml.tokens" not in meta and (path.parent / "tokenizer.json").exists():
        return Tokenizer.from_pretrained(path.parent)
    return Tokenizer.from_gguf_metadata(meta, source=str(path))
