"""fs_tokenizer: Byte-level BPE tokenizer for Qwen2/Qwen3 tokenizer.json, streaming decode and chat templates."""

__version__ = "0.1.0"
