"""The tiny demo model shipped inside this package: the default when no --model is given.

4.2M parameters with the Qwen3 architecture and file layout, trained by ``tools/train_demo_model.py`` on CPython's
documentation topics (``pydoc_data.topics``, PSF licence). It writes Python-documentation-flavoured English and
proves the stack end to end offline; it knows nothing else.
"""

import json
from pathlib import Path

from .errors import GenerateError

DEMO_MODEL = Path(__file__).parent / "demo_model"
# The demo runs on float32 copies (BLAS) on the numpy backend: nothing to compile, so a fresh install's first run
# starts at once (the bf16 kernels' first-run compile is 5-40 s, for a model that then decodes 256 tokens in a
# fraction of a second either way). Its K/V cache is float32 too. ``--dtype native`` runs it on the kernels.
DEMO_DTYPE = "float32"


def demo_model_path() -> Path:
    if not (DEMO_MODEL / "config.json").exists():
        raise GenerateError(f"the demo model is missing from {DEMO_MODEL}; pass --model PATH_OR_ID")
    return DEMO_MODEL


def demo_banner() -> str:
    meta = json.loads((DEMO_MODEL / "TRAINING.json").read_text()) if (DEMO_MODEL / "TRAINING.json").exists() else {}
    params = meta.get("parameters", 0) / 1e6
    return (
        f"Using the tiny demo model ({params:.1f}M parameters, trained on Python's documentation topics): it "
        "writes docs-flavoured English, nothing more. For a real model: --model Qwen/Qwen3-0.6B (downloads) "
        "or --model /path/to/a/Qwen3/directory"
    )
