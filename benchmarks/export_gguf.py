"""Export an fs/HF Qwen3 checkpoint directory to GGUF so llama.cpp runs the very same weights.

    uv run --group bench --package fs-generate python benchmarks/export_gguf.py MODEL_DIR OUT.gguf --type q8_0

The writing is fs-weights' ``gguf_export.write_gguf`` (llama.cpp's layout, the gguf package's quantizers); the
vocabulary is fs-tokenizer's ``gguf_fields`` of MODEL_DIR's tokenizer, or of --tokenizer DIR (a random checkpoint
may have none), padded to the embedding's rows the way llama.cpp's own converter does ("[PAD{i}]").
"""

import argparse
from pathlib import Path

from fs_tokenizer import Tokenizer
from fs_tokenizer.gguf_vocab import gguf_fields
from fs_weights import load_config
from fs_weights.gguf_export import write_gguf

TYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0"}


def export(model_dir: Path, out: Path, kind: str, tokenizer: Path | None = None) -> None:
    fields = gguf_fields(Tokenizer.from_pretrained(tokenizer or model_dir), load_config(model_dir).vocab_size)
    write_gguf(model_dir, out, ggml_type=TYPES[kind], tokenizer_fields=fields)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--type", choices=sorted(TYPES), default="bf16")
    ap.add_argument("--tokenizer", type=Path)
    args = ap.parse_args()
    export(args.model_dir, args.out, args.type, args.tokenizer)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB, {args.type})")


if __name__ == "__main__":
    main()
