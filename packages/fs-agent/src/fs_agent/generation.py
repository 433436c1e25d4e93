"""Day 1: prompts for the model and one greedy response from a real model (fs_model + fs_tokenizer)."""

from collections.abc import Callable
from typing import Any

import numpy as np

from .protocol import Message


def initial_messages(task: str, system_prompt: str) -> list[Message]:
    if task is None or not isinstance(task, str) or not task.strip():
        raise ValueError("task must not be empty")
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": task}]


def greedy_decode(
    model: Any, tokenizer: Any, prompt_ids: list[int], caches: list[Any], offset: int, max_tokens: int
) -> list[int]:
    """Feed ``prompt_ids`` at ``offset`` in one call, then one token per call; stop at EOS (not included)."""
    eos = getattr(tokenizer, "eos_token_id", None)
    eos_ids = set(getattr(tokenizer, "eos_token_ids", ()) or ()) | ({eos} if eos is not None else set())
    out: list[int] = []
    feed = list(prompt_ids)
    for _ in range(max_tokens):
        logits = model(_tokens(model, feed), offset, caches, logits_to_keep=1)
        offset += len(feed)
        token = int(np.argmax(_last(logits)))
        if token in eos_ids:
            break
        out.append(token)
        feed = [token]
    return out


def generate_response(
    model: Any,
    tokenizer: Any,
    messages: list[Message],
    cache_factory: Callable[[], list[Any]],
    max_tokens: int,
    enable_thinking: bool = False,
) -> str:
    if not isinstance(max_tokens, int) or max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    prompt = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
    )
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    caches = cache_factory()
    try:
        return tokenizer.decode(greedy_decode(model, tokenizer, ids, caches, 0, max_tokens))
    finally:
        for c in caches:
            release = getattr(c, "release", None)
            if callable(release):
                release()


def _tokens(model: Any, ids: list[int]) -> Any:
    make = getattr(model, "tokens_array", None)
    return make([ids]) if make is not None else np.asarray([ids], dtype=np.int64)


def _last(logits: Any) -> np.ndarray:
    if not isinstance(logits, np.ndarray):
        try:
            import mlx.core as mx

            if isinstance(logits, mx.array):
                return np.array(logits[0, -1].astype(mx.float32))
        except ImportError:  # pragma: no cover
            pass
    return np.asarray(logits)[0, -1]
