"""A self-contained byte-level tokenizer for random checkpoints on machines without real tokenizer files.

256 byte tokens (GPT-2's byte-to-character table, no merges) followed by Qwen3's special tokens, Qwen3's
normalizer and pre-tokenizer, and a ChatML template: every tool that reads a Qwen3 directory (fs, HF
tokenizers, transformers, mlx-lm) loads it, and every byte string round-trips. Only the IDs differ from Qwen3's.
"""

import json
from pathlib import Path

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
QWEN3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)
CHATML = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)


def _byte_chars() -> list[str]:
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def write_byte_tokenizer(dst: Path) -> None:
    added = [
        {
            "id": 256 + i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": i < 3,
        }
        for i, t in enumerate(SPECIALS)
    ]
    bytelevel = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    spec: dict[str, object] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN3_PATTERN}, "behavior": "Isolated", "invert": False},
                bytelevel,
            ],
        },
        "post_processor": bytelevel,
        "decoder": bytelevel,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {c: i for i, c in enumerate(_byte_chars())},
            "merges": [],
        },
    }
    config = {
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "tokenizer_class": "Qwen2Tokenizer",
        "errors": "replace",
        "split_special_tokens": False,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
        "chat_template": CHATML,
    }
    (dst / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    (dst / "tokenizer_config.json").write_text(
        json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
