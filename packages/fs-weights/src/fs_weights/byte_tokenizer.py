"""A self-contained byte-level tokenizer for random checkpoints on machines without real tokenizer files.

256 byte tokens (GPT-2's byte-to-character table, no merges) followed by Qwen3's special tokens, Qwen3's
normalizer and pre-tokenizer, and a ChatML template: every tool that reads a Qwen3 directory (fs, HF
tokenizers, transformers, mlx-lm) loads it, and every byte string round-trips. Only the IDs differ from Qwen3's.

The two files are data shipped beside this module (``byte_tokenizer_files/``), not generated here: the byte
table and the split pattern are fs-tokenizer's to compute (``fs_tokenizer.bytelevel``, ``pipeline``), and the
tests check these files against fs-tokenizer and HF tokenizers.
"""

import shutil
from pathlib import Path

FILES = Path(__file__).parent / "byte_tokenizer_files"
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]
VOCAB_SIZE = 256 + len(SPECIALS)
ENDOFTEXT, IM_END = 256, 258


def write_byte_tokenizer(dst: Path) -> None:
    """Copy ``tokenizer.json`` and ``tokenizer_config.json`` into the directory ``dst``."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(FILES / name, dst / name)
