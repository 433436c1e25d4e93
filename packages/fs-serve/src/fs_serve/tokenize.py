"""llama-server's ``POST /tokenize`` and ``POST /detokenize``, on the served model's own tokenizer.

Why: llama.cpp's users (and tools written for llama-server: token counters, prompt builders) call them to count or
inspect tokens without generating. Contract, as llama-server answers::

    POST /tokenize   {"content": str, "add_special": bool = false, "with_pieces": bool = false}
                  -> {"tokens": [int, ...]}  or, with_pieces, {"tokens": [{"id": int, "piece": str}, ...]}
    POST /detokenize {"tokens": [int, ...]}  -> {"content": str}

Special tokens in ``content`` (``<|im_start|>``) are parsed as special, as llama-server's endpoint does; Qwen3 adds
no BOS, so ``add_special`` changes nothing here. A piece that is not whole UTF-8 (one byte of a multi-byte
character) is given with U+FFFD for the missing part, as llama-server gives it.
"""

from typing import Annotated, Any

from pydantic import Field

from .errors import bad_request
from .protocol import Model, parse


class TokenizeRequest(Model):
    content: str
    add_special: bool = False
    with_pieces: bool = False


class DetokenizeRequest(Model):
    tokens: list[Annotated[int, Field(ge=0)]]


def tokenize(body: Any, tokenizer: Any) -> dict[str, Any]:
    req = parse(TokenizeRequest, body)
    ids = list(tokenizer.encode(req.content))
    if not req.with_pieces:
        return {"tokens": ids}
    return {"tokens": [{"id": i, "piece": tokenizer.token_bytes(i).decode("utf-8", "replace")} for i in ids]}


def detokenize(body: Any, tokenizer: Any, vocab_size: int) -> dict[str, Any]:
    req = parse(DetokenizeRequest, body)
    bad = [i for i in req.tokens if i >= vocab_size]
    if bad:
        raise bad_request(f"tokens: {bad[:5]} are not below the vocabulary size {vocab_size}", param="tokens")
    return {"content": tokenizer.decode(req.tokens)}
