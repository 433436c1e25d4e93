"""A multi-turn conversation that keeps its K/V between turns, so each turn prefills only its own tokens.

The conversation is kept as the ids the model actually saw (``tokens``): the first turn's ``[system] + user``
under the template, each answer exactly as generated (with the EOS that ended it), and each later turn's
end-of-answer text, user message and assistant header (``chat_prompt.next_turn``). Re-rendering the whole
history through the template instead would change what the model saw (Qwen3's template drops past ``<think>``
blocks) and force a full prefill every turn.

After a turn the caches hold the K/V of ``tokens[:n]`` (n = every position fed; the last sampled token never
is); the next turn's ``Generator`` resumes from them through a ``KVPrefix``. An interrupted answer
(``KeyboardInterrupt``) keeps the text so far, and the conversation continues from what was computed.
"""

from collections.abc import Iterator
from typing import Any

from .chat_prompt import next_turn, whole_turn
from .draft_model import DraftModel
from .errors import GenerateError
from .generate import Generator
from .outputs import Generation, GenerationStep
from .reused_prefix import KVPrefix


class ChatSession:
    def __init__(
        self, model: Any, tokenizer: Any, *, system: str | None = None, enable_thinking: bool = False, **sampling: Any
    ):
        if getattr(tokenizer, "chat_template", None) is None:
            raise GenerateError("a chat needs a tokenizer with a chat template")
        if sampling.get("kv_bits") is not None:  # its K/V are cut and carried between turns as exact arrays
            raise GenerateError("a chat keeps exact K/V across turns; kv_bits is for fs-generate and generate()")
        if sampling.get("draft_model") is not None and not isinstance(sampling["draft_model"], DraftModel):
            sampling["draft_model"] = DraftModel(sampling["draft_model"], model)  # one draft cache, every turn
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.enable_thinking = enable_thinking
        self.reset(system)

    def reset(self, system: str | None = None) -> None:
        """Forget the conversation (and its K/V); ``system`` starts the next one."""
        self.system = system
        if isinstance(self.sampling.get("draft_model"), DraftModel):
            self.sampling["draft_model"].reset()
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        self.tokens: list[int] = []  # every id of the conversation so far, as the model saw it
        self.prefix: KVPrefix | None = None  # K/V of tokens[:len(prefix.tokens)]
        self.ended_by: int | None = None  # the EOS that ended the last answer
        self.reused = self.prefilled = 0  # the last turn's prompt: ids resumed from K/V, ids fed
        self.last = Generation([], "", "length")  # the last answer

    def ask(self, text: str) -> Iterator[GenerationStep]:
        """Stream the answer to a user message ``text``; the conversation records it however the stream ends."""
        turn = (
            whole_turn(self.tokenizer, text, self.system, self.enable_thinking)
            if not self.tokens
            else next_turn(self.tokenizer, text, self.enable_thinking, ended_by=self.ended_by)
        )
        g = Generator(self.model, self.tokenizer, self.tokens + turn, prefix_cache=self.prefix, **self.sampling)
        self.messages.append({"role": "user", "content": text})
        try:
            yield from g.steps()
        finally:
            self._keep(g)

    def _keep(self, g: Generator) -> None:
        r = self.last = g.result
        self.reused, self.prefilled = g.reused, len(g.prompt) - g.reused
        self.tokens = g.prompt + r.token_ids + ([r.eos_token_id] if r.eos_token_id is not None else [])
        self.ended_by = r.eos_token_id
        self.messages.append({"role": "assistant", "content": r.text})
        caches = g.caches or []
        n = min((c.offset for c in caches), default=0)  # an interrupt may leave a layer one position ahead
        n = min(n, len(self.tokens))  # or, speculating, drafts fed past the last token it emitted
        if n and all(c.key_values is not None for c in caches):
            self.prefix = KVPrefix(self.tokens[:n], [(k[:, :, :n], v[:, :, :n]) for k, v in _kv(caches)])
        elif self.prefix is not None:  # interrupted before any K/V of this turn: the old prefix still holds
            self.prefix = KVPrefix(*_cut(self.prefix, self.tokens))


def _kv(caches: list[Any]) -> list[tuple[Any, Any]]:
    return [c.key_values for c in caches]


def _cut(prefix: KVPrefix, tokens: list[int]) -> tuple[list[int], list[tuple[Any, Any]]]:
    n, state = prefix.match(tokens)
    return tokens[:n], list(state or [])
