"""``POST /tokenize``, ``POST /detokenize`` and ``GET /tokenizer_info`` on the served model's own tokenizer, in both
dialects local servers speak: llama-server's and vLLM's.

Why: llama.cpp's users (token counters, prompt builders) call llama-server's form; lm-evaluation-harness (its
``local-completions`` model detects a "remote tokenizer" by ``/tokenizer_info`` + ``/tokenize``) and vLLM's own
clients call vLLM's. Which one a request speaks is decided by its field: ``content`` (llama-server) or
``prompt`` / ``messages`` (vLLM). Contract::

    POST /tokenize   {"content": str, "with_pieces": bool = false}               (llama-server)
                  -> {"tokens": [int, ...]}  or, with_pieces, {"tokens": [{"id": int, "piece": str}, ...]}
    POST /tokenize   {"prompt": str} | {"messages": [...], "add_generation_prompt": true}        (vLLM)
                  -> {"tokens": [int, ...], "count": int, "max_model_len": int}
    POST /detokenize {"tokens": [int, ...]}  -> {"content": str, "prompt": str}   (both keys: both dialects)
    GET  /tokenizer_info -> {"tokenizer_class", "eos_token", "bos_token", "pad_token", "chat_template",
                             "model_max_length"}

Special tokens in the text (``<|im_start|>``) are parsed as special, as both servers do; Qwen3 adds no BOS, so
``add_special`` / ``add_special_tokens`` change nothing here. A piece that is not whole UTF-8 (one byte of a
multi-byte character) is given with U+FFFD for the missing part, as llama-server gives it.
"""

from typing import Annotated, Any

from pydantic import Field, model_validator

from .errors import bad_request
from .protocol import Message, Model, parse
from .render import message_dict


class TokenizeRequest(Model):
    content: str | None = None  # llama-server
    prompt: str | None = None  # vLLM
    messages: list[Message] | None = None  # vLLM: the chat template's rendering
    add_generation_prompt: bool = True
    add_special: bool = False
    add_special_tokens: bool = False
    with_pieces: bool = False

    @model_validator(mode="after")
    def _one(self) -> "TokenizeRequest":
        given = [n for n in ("content", "prompt", "messages") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("content: give exactly one of content (llama-server), prompt or messages (vLLM)")
        return self


class DetokenizeRequest(Model):
    tokens: list[Annotated[int, Field(ge=0)]]


def tokenize(body: Any, tokenizer: Any, max_model_len: int) -> dict[str, Any]:
    req = parse(TokenizeRequest, body)
    if req.messages is not None:
        text = tokenizer.apply_chat_template([message_dict(m) for m in req.messages],
                                             add_generation_prompt=req.add_generation_prompt)  # fmt: skip
    else:
        text = req.content if req.content is not None else req.prompt
    ids = list(tokenizer.encode(text))
    if req.content is None:
        return {"tokens": ids, "count": len(ids), "max_model_len": max_model_len}
    if not req.with_pieces:
        return {"tokens": ids}
    return {"tokens": [{"id": i, "piece": tokenizer.token_bytes(i).decode("utf-8", "replace")} for i in ids]}


def detokenize(body: Any, tokenizer: Any, vocab_size: int) -> dict[str, Any]:
    req = parse(DetokenizeRequest, body)
    bad = [i for i in req.tokens if i >= vocab_size]
    if bad:
        raise bad_request(f"tokens: {bad[:5]} are not below the vocabulary size {vocab_size}", param="tokens")
    text = tokenizer.decode(req.tokens)
    return {"content": text, "prompt": text}


def tokenizer_info(tokenizer: Any, max_model_len: int) -> dict[str, Any]:
    config = getattr(tokenizer, "config", {}) or {}

    def token(key: str) -> str | None:
        v = config.get(key)
        return v.get("content") if isinstance(v, dict) else v if isinstance(v, str) else None

    template = config.get("chat_template")
    return {
        "tokenizer_class": config.get("tokenizer_class", type(tokenizer).__name__),
        "eos_token": token("eos_token"),
        "bos_token": token("bos_token"),
        "pad_token": token("pad_token"),
        "chat_template": template if isinstance(template, str) else None,
        "model_max_length": max_model_len,
    }
