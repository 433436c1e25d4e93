"""Prompts for the model, and one greedy response decoded through fs-generate's decode step.

The agent renders its messages with the tokenizer's chat template and decodes greedily with
``fs_generate.generate_step`` - the same step every fs decoder uses - stopping at the model's EOS set
(``fs_generate.resolve_eos``: the model's generation config, else the tokenizer's).
"""

from collections.abc import Callable
from typing import Any

from fs_generate import generate_step, greedy, resolve_eos
from fs_generate.constraints import make_constraint
from fs_model import CausalLM

from .protocol import Message


def initial_messages(task: str, system_prompt: str) -> list[Message]:
    if task is None or not isinstance(task, str) or not task.strip():
        raise ValueError("task must not be empty")
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": task}]


def greedy_decode(
    model: CausalLM,
    tokenizer: Any,
    prompt_ids: list[int],
    caches: list[Any],
    offset: int,
    max_tokens: int,
    json_schema: Any = None,
) -> list[int]:
    """Feed ``prompt_ids`` at ``offset`` in one call, then one token per call; stop at EOS (not included).
    ``json_schema``: every token is chosen among those the schema allows (fs_generate's constraints), and decoding
    ends where the schema's JSON does."""
    eos = resolve_eos(model, tokenizer, None)
    out: list[int] = []
    if max_tokens <= 0:
        return out
    c = None if json_schema is None else make_constraint(tokenizer, model.vocab_size, eos, json_schema, None, None)
    pick = greedy if c is None else (lambda z: greedy(c.mask(z)))
    steps = generate_step(model, prompt_ids, caches, pick, offset=offset, chunk=max(1, len(prompt_ids)))
    for token, _ in steps:
        if token in eos or (c is not None and token in c.ends):
            break
        out.append(token)
        if c is not None:
            c.accept(token)
            if c.stopped:
                break
        if len(out) >= max_tokens:
            break
    return out


def generate_response(
    model: CausalLM,
    tokenizer: Any,
    messages: list[Message],
    cache_factory: Callable[[], list[Any]],
    max_tokens: int,
    enable_thinking: bool = False,
    json_schema: Any = None,
) -> str:
    if not isinstance(max_tokens, int) or max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    prompt = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
    )
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    caches = cache_factory()
    try:
        return tokenizer.decode(greedy_decode(model, tokenizer, ids, caches, 0, max_tokens, json_schema))
    finally:
        for c in caches:
            release = getattr(c, "release", None)
            if callable(release):
                release()
