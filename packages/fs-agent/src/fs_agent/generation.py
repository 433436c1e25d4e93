"""Prompts for the model, and one greedy response decoded through fs-generate's decode step.

The agent renders its messages with the tokenizer's chat template and decodes greedily with
``fs_generate.generate_step`` - the same step every fs decoder uses - stopping at the model's EOS set
(``fs_generate.resolve_eos``: the model's generation config, else the tokenizer's).

Prompt lookup is on by default (``PROMPT_LOOKUP`` drafts per pass, fs-generate's lossless speculative decoding):
an agent's answers repeat its context - an edit restates the file it changes, a tool call the path it read - and
on a batch-invariant model the verified drafts give exactly the tokens plain decoding gives. On a model that is not
batch invariant (float32 copies, MLX) it is off: there it would change the output.
"""

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from fs_generate import generate_step, greedy, resolve_eos
from fs_generate.constraints import make_constraint
from fs_generate.speculative import Speculation
from fs_model import CausalLM

from .protocol import Message

PROMPT_LOOKUP = 4  # drafts per pass by default (fs-agent --prompt-lookup-num-tokens 0: off)


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
    prompt_lookup: int = PROMPT_LOOKUP,
    history: Sequence[int] = (),
) -> list[int]:
    """Feed ``prompt_ids`` at ``offset`` in one call, then one token per call; stop at EOS (not included).
    ``json_schema``: every token is chosen among those the schema allows (fs_generate's constraints), and decoding
    ends where the schema's JSON does (a callable: called once, for this response - ``tool_choice.ActionSchemas``
    builds each from the workspace as it is). ``prompt_lookup``: drafts per pass where the model is batch invariant (the
    same tokens, fewer passes); ``history``: the tokens already in ``caches`` (before ``offset``), drafted from."""
    eos = resolve_eos(model, tokenizer, None)
    if callable(json_schema):
        json_schema = json_schema()
    out: list[int] = []
    if max_tokens <= 0:
        return out
    c = None if json_schema is None else make_constraint(tokenizer, model.vocab_size, eos, json_schema, None, None)
    pick = greedy if c is None else (lambda z: greedy(c.mask(z)))
    spec = None
    steps: Iterator[tuple[int, float]]
    if prompt_lookup and getattr(model, "batch_invariant", False):
        context = [*history, *prompt_ids]
        spec = Speculation(model, prompt_ids, caches, pick, lambda: [*context, *out], prompt_lookup, offset,
                           room=lambda: max_tokens - len(out) - 1)  # fmt: skip
        steps = ((t, lp) for t, lp, _ in spec.tokens())
    else:
        steps = generate_step(model, prompt_ids, caches, pick, offset=offset, chunk=max(1, len(prompt_ids)))
    try:
        return _take(steps, out, eos, c, max_tokens)
    finally:
        if spec is not None:
            spec.settle()  # no draft stays in the caches past the emitted tokens


def _take(steps: Iterator[tuple[int, float]], out: list[int], eos: Any, c: Any, max_tokens: int) -> list[int]:
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
    prompt_lookup: int = PROMPT_LOOKUP,
) -> str:
    if not isinstance(max_tokens, int) or max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    prompt = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
    )
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    caches = cache_factory()
    try:
        return tokenizer.decode(greedy_decode(model, tokenizer, ids, caches, 0, max_tokens, json_schema, prompt_lookup))
    finally:
        for c in caches:
            release = getattr(c, "release", None)
            if callable(release):
                release()
