"""Export an fs/HF Qwen3 checkpoint directory to GGUF so llama.cpp runs the very same weights.

    uv run --group bench --package fs-generate python benchmarks/export_gguf.py MODEL_DIR OUT.gguf --type q8_0

The same as ``fs-convert-gguf MODEL_DIR OUT.gguf --outtype q8_0 --overwrite`` (fs-generate's command, whose
``export`` the other benchmark scripts call through this module).
"""

import sys
from pathlib import Path

from fs_generate.gguf_cli import export as _export
from fs_generate.gguf_cli import main


def export(model_dir: Path, out: Path, kind: str, tokenizer: Path | None = None) -> None:
    _export(str(model_dir), Path(out), kind, str(tokenizer) if tokenizer else None, overwrite=True)


if __name__ == "__main__":
    sys.exit(main([*sys.argv[1:], "--overwrite"]))
