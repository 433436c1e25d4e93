"""Prompt token ids from what a command-line user typed, under the model's chat template or without it.

Three shapes, all cut from the model's own template so no chat format is written down here:

- ``whole_turn``: ``[system] + user`` with the assistant header (what ``fs-generate --prompt`` sends);
- ``open_turn`` / ``rest_of_turn``: the same conversation split inside the user message, as mlx-lm's
  ``cache_prompt`` and ``generate --prompt-cache-file`` do: the cached part ends with the user's text still
  open, and the later prompt continues that message (``open + rest`` renders like one user message whose text
  is both joined);
- ``next_turn``: what follows a finished assistant answer in a multi-turn chat: the template's end-of-turn text,
  then a new user message and the assistant header (``fs-chat`` prefills only this).

Token ids are encoded piece by piece (as mlx-lm does), so ``open + rest`` may tokenize differently from the
joined text at the seam; generation conditions on exactly the ids these functions return.
"""

from typing import Any

from fs_tokenizer import TokenizerError

from .errors import GenerateError

MARK = "\ue000fs-mark\ue000"  # a private-use marker: no real message contains it


def _render(tok: Any, messages: list[dict[str, str]], **kw: Any) -> str:
    try:
        return str(tok.apply_chat_template(messages, tokenize=False, **kw))
    except TokenizerError as e:
        raise GenerateError(str(e)) from None


def _messages(system: str | None, user: str) -> list[dict[str, str]]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


def whole_turn(tok: Any, text: str, system: str | None = None, enable_thinking: bool = False) -> list[int]:
    rendered = _render(tok, _messages(system, text), add_generation_prompt=True, enable_thinking=enable_thinking)
    return list(tok.encode(rendered))


def open_turn(tok: Any, text: str, system: str | None = None) -> list[int]:
    """Everything up to and including ``text`` inside the user message; the message is left open."""
    shape = _render(tok, _messages(system, MARK), add_generation_prompt=False)
    return list(tok.encode(shape[: shape.index(MARK)] + text))


def rest_of_turn(tok: Any, text: str, enable_thinking: bool = False) -> list[int]:
    """``text`` continuing an open user message, then the end of that message and the assistant header."""
    shape = _render(tok, _messages(None, MARK), add_generation_prompt=True, enable_thinking=enable_thinking)
    return list(tok.encode(text + shape[shape.index(MARK) + len(MARK) :]))


def end_of_answer(tok: Any) -> str:
    """The template's text after an assistant message's content (Qwen3's ``<|im_end|>`` and a newline)."""
    shape = _render(tok, [{"role": "user", "content": "x"}, {"role": "assistant", "content": MARK}])
    return shape[shape.index(MARK) + len(MARK) :]


def next_turn(tok: Any, text: str, enable_thinking: bool = False, *, ended_by: int | None = None) -> list[int]:
    """The ids that follow an assistant answer: the rest of its end-of-turn text (when the EOS ``ended_by``
    already ended the answer and the end text starts with that token, only what follows it), then a user
    message with ``text`` and the assistant header."""
    end = end_of_answer(tok)
    eos = tok.decode([ended_by]) if ended_by is not None else ""
    if eos and end.startswith(eos):
        end = end[len(eos) :]
    turn = _render(tok, _messages(None, text), add_generation_prompt=True, enable_thinking=enable_thinking)
    return list(tok.encode(end + turn))
