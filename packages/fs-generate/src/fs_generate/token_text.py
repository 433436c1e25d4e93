"""Between text and token ids for one request: the prompt in (text, or ids checked against the vocabulary), the
streamed text out.

    prompt_ids(model, tokenizer, "Hello")   -> [9707]        # a str is encoded; ids must be ints in [0, V)
    prompt_ids(model, tokenizer, [])        -> GenerateError  # a decoder-only model needs a token to start from
    text_decoder(tokenizer)                 -> its stream decoder, ids past the vocabulary as U+FFFD
"""

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from fs_model import CausalLM

from .errors import GenerateError


def prompt_ids(model: CausalLM, tokenizer: Any, prompt: str | Sequence[int]) -> list[int]:
    if isinstance(prompt, str):
        ids = list(tokenizer.encode(prompt))
    elif isinstance(prompt, Iterable):
        ids = list(prompt)
        if not all(type(i) is int or isinstance(i, np.integer) for i in ids):
            raise GenerateError("a token-id prompt must contain only ints")
        ids = [int(i) for i in ids]
        V = model.vocab_size
        bad = [(pos, i) for pos, i in enumerate(ids) if not 0 <= i < V]
        if bad:
            raise GenerateError(f"prompt token id {bad[0][1]} at position {bad[0][0]} is out of range [0, {V})")
    else:
        raise GenerateError(f"prompt must be str or a list of token ids, got {type(prompt).__name__}")
    if not ids:
        raise GenerateError(
            "empty prompt: a decoder-only model needs at least one token to condition on "
            "(Qwen3 has no BOS; pass [<|endoftext|>] explicitly if that is what you want)"
        )
    return ids


def text_decoder(tokenizer: Any) -> Any:
    if tokenizer is None:
        return None
    try:  # fs_tokenizer: a model may emit ids past the tokenizer's vocabulary (padding rows) -> U+FFFD
        return tokenizer.stream_decoder(unknown="replace")
    except TypeError:
        return tokenizer.stream_decoder()
