"""OpenAI's response objects, built from each choice's deltas (choices.py): the streamed chunks, and the whole
response as the same deltas summed. Shapes:

    chat:        {"id": "chatcmpl-…", "object": "chat.completion", "created", "model",
                  "choices": [{"index", "message": {"role", "content", "reasoning_content"?, "tool_calls"?},
                               "logprobs": {"content": [...]} | null, "finish_reason"}], "usage"}
    chat stream: {"object": "chat.completion.chunk",
                  "choices": [{"index", "delta": {...}, "logprobs", "finish_reason"}]}
    completions: {"id": "cmpl-…", "object": "text_completion",
                  "choices": [{"index", "text", "logprobs", "finish_reason"}]}

``usage`` counts each distinct prompt once (``n`` choices share it) and every choice's generated tokens;
``prompt_tokens_details.cached_tokens`` is the prompt tokens the engine's prefix cache supplied.
"""

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from fs_generate import Generation

from .choices import logprob_entries, token_entry


@dataclass
class Reply:
    """What every chunk of one response shares, and the usage it adds up."""

    kind: str  # "chat" | "completion"
    model: str
    tokenizer: Any
    logprobs: bool
    id: str = field(default="")
    created: int = field(default_factory=lambda: int(time.time()))
    prompts: dict[int, Generation] = field(default_factory=dict)  # prompt index -> its first finished choice
    completion_tokens: int = 0

    def __post_init__(self) -> None:
        self.id = ("chatcmpl-" if self.kind == "chat" else "cmpl-") + secrets.token_hex(12)

    def finished(self, prompt_index: int, g: Generation) -> None:
        self.prompts.setdefault(prompt_index, g)
        self.completion_tokens += len(g.token_ids)

    def usage(self) -> dict[str, Any]:
        prompt = sum(len(g.prompt_ids) for g in self.prompts.values())
        return {
            "prompt_tokens": prompt,
            "completion_tokens": self.completion_tokens,
            "total_tokens": prompt + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": sum(g.cached_tokens for g in self.prompts.values())},
        }

    # --- log-probabilities ----------------------------------------------------------------------------------

    def format_logprobs(
        self, entries: list[tuple[int, float | None, tuple[tuple[int, float], ...]]], offset: int
    ) -> Any:
        """``entries``: (token, logprob, top) per token; an echoed prompt's first token has logprob None, and its
        ``top_logprobs`` entry is null too (nothing predicted it), as in OpenAI's legacy completions."""
        if not self.logprobs or not entries:
            return None
        tok = self.tokenizer
        if self.kind == "chat":
            return {"content": logprob_entries(tok, entries)}
        tokens = [token_entry(tok, t, lp)["token"] for t, lp, _ in entries]
        offsets = []
        for s in tokens:
            offsets.append(offset)
            offset += len(s)
        return {
            "tokens": tokens,
            "token_logprobs": [lp for _, lp, _ in entries],
            "top_logprobs": [
                None if lp is None else {token_entry(tok, i, p)["token"]: p for i, p in tops} for _, lp, tops in entries
            ],
            "text_offset": offsets,
        }

    # --- streamed -------------------------------------------------------------------------------------------

    def chunk(self, index: int, delta: dict[str, Any], finish: str | None = None, offset: int = 0) -> str:
        d = dict(delta)
        lps = self.format_logprobs(d.pop("logprobs", []), offset)
        if self.kind == "chat":
            choice: dict[str, Any] = {"index": index, "delta": d, "logprobs": lps, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": index, "text": d.get("text", ""), "logprobs": lps, "finish_reason": finish}
            obj = "text_completion"
        return self.sse(
            {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [choice]}
        )

    def usage_chunk(self) -> str:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        body = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": []}
        return self.sse(body | {"usage": self.usage()})

    @staticmethod
    def sse(body: dict[str, Any]) -> str:
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    # --- whole ----------------------------------------------------------------------------------------------

    def whole(self, choices: list[tuple[list[dict[str, Any]], str]]) -> dict[str, Any]:
        """``choices``: per choice index, its deltas and its finish reason."""
        out = []
        for index, (deltas, finish) in enumerate(choices):
            entries = [e for d in deltas for e in d.get("logprobs", [])]
            lps = self.format_logprobs(entries, 0)
            if self.kind == "chat":
                out.append({"index": index, "message": _message(deltas), "logprobs": lps, "finish_reason": finish})
            else:
                text = "".join(d.get("text", "") for d in deltas)
                out.append({"index": index, "text": text, "logprobs": lps, "finish_reason": finish})
        obj = "chat.completion" if self.kind == "chat" else "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": out,
            "usage": self.usage(),
        }


def _message(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    content = "".join(d.get("content", "") for d in deltas)
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    calls = [{k: v for k, v in c.items() if k != "index"} for d in deltas for c in d.get("tool_calls", [])]
    msg: dict[str, Any] = {"role": "assistant", "content": None if calls and not content.strip() else content}
    if reasoning:
        msg["reasoning_content"] = reasoning
    if calls:
        msg["tool_calls"] = calls
    return msg
