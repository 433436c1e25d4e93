"""A tokenizer rebuilt from a GGUF file's metadata, so a llama.cpp model file needs nothing beside it.

llama.cpp's converter stores a byte-level BPE vocabulary as parallel arrays: ``tokenizer.ggml.tokens`` (the
vocabulary's strings, id = index), ``tokenizer.ggml.token_type`` (1 normal, 3 control, 4 user-defined, 5 unused
padding rows), ``tokenizer.ggml.merges`` ("a b" strings) and ``tokenizer.ggml.pre`` naming the pre-tokenizer
by family (fs-weights' ``gguf_file`` reads the file and hands the metadata here). This module turns them back
into the ``tokenizer.json`` structure HF writes: normal tokens -> the BPE vocabulary, control tokens -> special
added tokens, user-defined ones (Qwen3's ``<think>``) -> plain added tokens, unused padding rows dropped. The
pre-tokenizer cannot be stored in GGUF, only named; the families known here are the ones whose
``tokenizer.json`` parts are written below (Qwen2/Qwen3's), any other is refused.
"""

from typing import Any

from .errors import TokenizerError

NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZERS: dict[str, dict[str, Any]] = {  # tokenizer.ggml.pre -> the tokenizer.json parts it stands for
    "qwen2": {
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
                BYTE_LEVEL,
            ],
        },
    },
}


def spec_from_gguf(meta: dict[str, Any], source: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(tokenizer.json, tokenizer_config.json, generation_config.json) as dicts, from GGUF metadata."""
    model, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre")
    if model != "gpt2":
        raise TokenizerError(f"{source}: tokenizer.ggml.model {model!r} is not supported (only byte-level BPE, 'gpt2')")
    if pre not in PRE_TOKENIZERS:
        raise TokenizerError(
            f"{source}: tokenizer.ggml.pre {pre!r} is not a pre-tokenizer known here ({', '.join(PRE_TOKENIZERS)}); "
            "put the model's tokenizer.json beside the GGUF file"
        )
    tokens, types = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.token_type")
    merges = meta.get("tokenizer.ggml.merges", [])
    if not isinstance(tokens, list) or not isinstance(types, list) or len(tokens) != len(types):
        raise TokenizerError(f"{source}: tokenizer.ggml.tokens / token_type are missing or of different lengths")
    vocab: dict[str, int] = {}
    added: list[dict[str, Any]] = []
    for i, (text, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind == NORMAL:
            vocab[text] = i
        elif kind in (CONTROL, USER_DEFINED):
            added.append({"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": kind == CONTROL})  # fmt: skip
        elif kind != UNUSED:
            raise TokenizerError(f"{source}: token {i} ({text!r}) has type {kind}, not one a byte-level BPE uses")
    spec = {
        "version": "1.0",
        "added_tokens": added,
        **PRE_TOKENIZERS[pre],
        "post_processor": BYTE_LEVEL,
        "decoder": BYTE_LEVEL,
        "model": {"type": "BPE", "vocab": vocab, "merges": list(merges), "ignore_merges": False},
    }
    config: dict[str, Any] = {}
    template = meta.get("tokenizer.chat_template")
    if isinstance(template, str):
        config["chat_template"] = template
    gen: dict[str, Any] = {}
    for key, name in (("eos_token_id", "eos_token"), ("bos_token_id", "bos_token"), ("padding_token_id", "pad_token")):
        tid = meta.get(f"tokenizer.ggml.{key}")
        if isinstance(tid, int) and 0 <= tid < len(tokens):
            config[name] = tokens[tid]
            gen[key.replace("padding_", "pad_")] = tid
    return spec, config, gen


def _ids_only(part: Any) -> Any:
    """A tokenizer.json part without ``trim_offsets``, which moves character offsets but never a token id (the
    shipped demo tokenizer has it on, Qwen3's off: the same ids, the same GGUF pre-tokenizer)."""
    if isinstance(part, dict):
        return {k: _ids_only(v) for k, v in part.items() if k != "trim_offsets"}
    if isinstance(part, list):
        return [_ids_only(v) for v in part]
    return part


def gguf_fields(tok: Any, vocab_size: int) -> dict[str, Any]:
    """The ``tokenizer.*`` GGUF keys for a byte-level BPE tokenizer with Qwen2's pre-tokenizer (the inverse of
    ``spec_from_gguf``): ids past the tokenizer up to the model's ``vocab_size`` become unused ``[PADn]`` rows."""
    spec = tok.spec
    if _ids_only(spec.get("pre_tokenizer")) != _ids_only(PRE_TOKENIZERS["qwen2"]["pre_tokenizer"]):
        raise TokenizerError(f"{tok.source}: only Qwen2's pre-tokenizer has a GGUF name here ('qwen2')")
    tokens, types = [f"[PAD{i}]" for i in range(vocab_size)], [UNUSED] * vocab_size
    for text, i in spec["model"]["vocab"].items():
        tokens[i], types[i] = text, NORMAL
    for t in spec.get("added_tokens", []):
        tokens[t["id"]], types[t["id"]] = t["content"], CONTROL if t.get("special") else USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"].get("merges", [])]
    fields: dict[str, Any] = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
    }
    eos = tok.eos_token_id
    if eos is not None:
        fields["tokenizer.ggml.eos_token_id"] = eos
    document_end = tok.token_to_id("<|endoftext|>")  # Qwen's: llama.cpp's converter makes it BOS and padding
    if document_end is not None:
        fields["tokenizer.ggml.bos_token_id"] = fields["tokenizer.ggml.padding_token_id"] = document_end
    fields["tokenizer.ggml.add_bos_token"] = False  # Qwen prompts start with no BOS
    if tok.chat_template is not None:
        fields["tokenizer.chat_template"] = tok.config["chat_template"]
    return fields
