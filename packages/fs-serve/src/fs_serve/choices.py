"""One choice's output as it streams: engine steps in, OpenAI deltas out. The non-streamed response is built
from the very same deltas, so a stream always concatenates to the non-streamed answer.

Text passes two hold-backs before it is sent: the characters that might begin a stop string (the engine cuts the
final text at a stop string; what was sent must be a prefix of it), then, for chat, the characters that might
begin a ``<think>`` / ``<tool_call>`` tag (tags never leak into ``content``). Reasoning goes to
``reasoning_content``; a complete ``<tool_call>{json}</tool_call>`` becomes one ``tool_calls`` entry; a block whose
JSON does not parse is given back as content, tags and all (the client sees what the model said); without tools
``<tool_call>`` is plain content.

Log-probabilities cover the generated tokens (``Generation.token_ids``; an ending EOS is not one of them), each
reported once, in the chunk that follows its step.
"""

import secrets
from typing import Any

from fs_generate import Generation, GenerationStep
from fs_generate.stopping import StopStrings
from fs_generate.tool_calls import CALL, END_CALL, OutputParser, partial_call

# "cancelled" (a server shutting down cut the answer short) reads as "length": the output is incomplete
FINISH = {"eos": "stop", "stop": "stop", "length": "length", "context": "length", "cancelled": "length"}


def token_entry(tokenizer: Any, token: int, lp: float | None) -> dict[str, Any]:
    raw = tokenizer.token_bytes(token)
    return {"token": raw.decode("utf-8", errors="replace"), "logprob": lp, "bytes": list(raw)}


def logprob_entries(tokenizer: Any, entries: list[Any]) -> list[dict[str, Any]]:
    """``(token, logprob, top)`` triples as OpenAI's chat / Responses entries: token, logprob, bytes, top_logprobs."""
    out = []
    for t, lp, tops in entries:
        e = token_entry(tokenizer, t, lp)
        e["top_logprobs"] = [token_entry(tokenizer, i, p) for i, p in tops]
        out.append(e)
    return out


class ChoiceStream:
    def __init__(
        self,
        index: int,
        tokenizer: Any,
        stops: list[str],
        *,
        chat: bool,
        tools: bool,
        in_reasoning: bool,
        forced: bool = False,
    ):
        """``forced``: the grammar forces one tool call; cut by the budget it is still a call (partial arguments,
        ``finish_reason: "length"``), never ``<tool_call>`` text in ``content``."""
        self.index, self.tok, self.chat, self.tools, self.forced = index, tokenizer, chat, tools, forced
        self.stops = StopStrings(stops)
        self.parser = OutputParser(in_reasoning, tool_calls=tools) if chat else None
        self.text = ""  # everything the steps delivered
        self.sent = 0  # characters of ``text`` passed on (a prefix of the final text)
        self.tokens = 0  # generated tokens seen (EOS excluded)
        self.calls = 0
        self.logprobs: list[tuple[int, float, tuple[tuple[int, float], ...]]] = []

    # --- in -------------------------------------------------------------------------------------------------

    def feed(self, steps: list[GenerationStep], eos: frozenset[int]) -> dict[str, Any] | None:
        """The delta for these steps (None when there is nothing to send yet)."""
        for s in steps:
            if s.finish_reason is None:  # the last step's text may be cut by a stop string: finish() has it right
                self.text += s.text
            if not (s.finish_reason == "eos" and s.token_id in eos):
                self.tokens += 1
                self.logprobs.append((s.token_id, s.logprob, s.top_logprobs))
        safe = len(self.text) - (self.stops.holdback(self.text) if self.stops.stop else 0)
        return self._delta(self._release(safe))

    def finish(self, result: Generation) -> tuple[dict[str, Any] | None, str]:
        """The last delta (the held-back text that survived the stop strings) and the OpenAI finish reason."""
        self.text = result.text
        delta = self._delta(self._release(len(self.text)), closing=True)
        reason = FINISH.get(result.finish_reason, "stop")
        if self.calls and reason == "stop":
            reason = "tool_calls"
        return delta, reason

    def _release(self, upto: int) -> str:
        piece = self.text[self.sent : upto] if upto > self.sent else ""
        self.sent = max(self.sent, upto)
        return piece

    # --- out ------------------------------------------------------------------------------------------------

    def _delta(self, piece: str, closing: bool = False) -> dict[str, Any] | None:
        delta: dict[str, Any] = {}
        if self.parser is None:
            if piece:
                delta["text"] = piece
        else:
            events = [(k, v, True) for k, v in self.parser.feed(piece)] if piece else []
            if closing:
                events += [(k, v, False) for k, v in self.parser.close()]
            for kind, value, closed in events:
                if kind == "content":
                    delta["content"] = delta.get("content", "") + value
                elif kind == "reasoning":
                    delta["reasoning_content"] = delta.get("reasoning_content", "") + value
                elif kind == "tool_call":
                    delta.setdefault("tool_calls", []).append(self._call(value.name, value.arguments_json))
                elif self.forced and not closed:  # the budget cut the forced call: a call, as far as it got
                    name, arguments = partial_call(value)
                    delta.setdefault("tool_calls", []).append(self._call(name, arguments))
                else:  # a block that is not a call: what the model wrote, tags and all
                    delta["content"] = delta.get("content", "") + CALL + value + (END_CALL if closed else "")
        if self.logprobs:
            delta["logprobs"], self.logprobs = self.logprobs, []
        return delta or None

    def _call(self, name: str, arguments: str) -> dict[str, Any]:
        self.calls += 1
        return {
            "index": self.calls - 1,
            "id": f"call_{secrets.token_hex(12)}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
