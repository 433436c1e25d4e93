"""The Responses API's output: one choice's deltas (choices.py) turned into output items and the documented event
stream, the whole response being the very same items (so a stream always adds up to the non-streamed answer).

Items, in the order the model produced them:

    {"type": "reasoning", "id": "rs_…", "summary": [], "content": [{"type": "reasoning_text", "text"}], "status"}
    {"type": "message", "id": "msg_…", "role": "assistant", "status",
     "content": [{"type": "output_text", "text", "annotations": [], "logprobs": [...]}]}
    {"type": "function_call", "id": "fc_…", "call_id": "call_…", "name", "arguments", "status"}

Events, each with ``type`` and a ``sequence_number`` counting from 0: ``response.created``,
``response.in_progress``; per reasoning or message item ``response.output_item.added``,
``response.content_part.added``, then ``response.reasoning_text.delta`` / ``response.output_text.delta`` as text
arrives, then ``….done``, ``response.content_part.done``, ``response.output_item.done``; per function call
``output_item.added``, ``response.function_call_arguments.delta`` and ``.done``, ``output_item.done``; last
``response.completed``, whose response says ``"status": "incomplete"`` with ``incomplete_details.reason:
"max_output_tokens"`` when the budget cut the answer (and the item it cut is ``"status": "incomplete"``). Always
``response.completed``, as vLLM sends it: the openai SDK's stream helper (``get_final_response``) accepts no
other last event.

Whitespace that arrives before any answer text (Qwen3 writes ``\\n\\n`` after ``</think>``) is held: a turn that
only calls tools has no empty message item.
"""

import secrets
import time
from typing import Any

from fs_generate import Generation

from .choices import logprob_entries
from .responses_request import NamedTool, ResponsesRequest


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class ResponseEvents:
    def __init__(self, req: ResponsesRequest, model: str, tokenizer: Any, logprobs: bool):
        self.req, self.model, self.tok, self.logprobs = req, model, tokenizer, logprobs
        self.id, self.created = _id("resp"), int(time.time())
        self.seq = 0
        self.items: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the reasoning or message item text is streaming into
        self.held = ""  # leading whitespace of an answer not begun yet
        self.usage: dict[str, Any] | None = None
        self.status = "in_progress"

    # --- the response object --------------------------------------------------------------------------------

    def response(self) -> dict[str, Any]:
        r = self.req
        fmt = r.text.format.model_dump(by_alias=True, exclude_none=True) if r.text and r.text.format else None
        choice = r.tool_choice
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": self.status,
            "model": self.model,
            "output": self.items,
            "usage": self.usage,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if self.status == "incomplete" else None,
            "instructions": r.instructions,
            "max_output_tokens": r.max_output_tokens,
            "parallel_tool_calls": r.parallel_tool_calls if r.parallel_tool_calls is not None else True,
            "temperature": r.temperature,
            "top_p": r.top_p,
            "tool_choice": choice.model_dump() if isinstance(choice, NamedTool) else choice or "auto",
            "tools": [t.model_dump(exclude_none=True) for t in r.tools or []],
            "text": {"format": fmt or {"type": "text"}},
            "truncation": "disabled",
            "metadata": r.metadata or {},
            "previous_response_id": None,
            "reasoning": {"effort": r.reasoning.effort if r.reasoning else None, "summary": None},
            "store": False,
        }

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    # --- in: the choice's deltas ----------------------------------------------------------------------------

    def start(self) -> list[dict[str, Any]]:
        return [self.event("response.created", response=self.response()),
                self.event("response.in_progress", response=self.response())]  # fmt: skip

    def feed(self, delta: dict[str, Any] | None) -> list[dict[str, Any]]:
        if not delta:
            return []
        out: list[dict[str, Any]] = []
        if delta.get("reasoning_content"):
            out += self._text("reasoning", delta["reasoning_content"], [])
        if delta.get("content"):
            out += self._text("message", delta["content"], delta.get("logprobs", []))
        for call in delta.get("tool_calls", []):
            out += self._close()
            out += self._call(call)
        return out

    def finish(self, finish_reason: str, result: Generation | None, reasoning_tokens: int) -> list[dict[str, Any]]:
        """``finish_reason`` as choices.py gives it; ``length`` makes the response (and its last item) incomplete."""
        self.held = ""
        incomplete = finish_reason == "length"
        out = self._close("incomplete" if incomplete else "completed")
        if incomplete and self.items and self.items[-1]["status"] == "completed":
            self.items[-1]["status"] = "incomplete"
        if result is not None:
            cached = result.cached_tokens
            n_in, n_out = len(result.prompt_ids), len(result.token_ids)
            self.usage = {"input_tokens": n_in, "input_tokens_details": {"cached_tokens": cached},
                          "output_tokens": n_out, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                          "total_tokens": n_in + n_out}  # fmt: skip
        self.status = "incomplete" if incomplete else "completed"
        return [*out, self.event("response.completed", response=self.response())]

    # --- the items ------------------------------------------------------------------------------------------

    def _text(self, kind: str, text: str, entries: list[Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if kind == "message" and (self.open is None or self.open["type"] != "message"):
            if not (self.held + text).strip():  # nothing but whitespace yet: it may precede a tool call
                self.held += text
                return out
            text, self.held = self.held + text, ""
        if self.open is not None and self.open["type"] != kind:
            out += self._close()
        if self.open is None:
            out += self._begin(kind)
        item = self.open
        assert item is not None
        part = item["content"][0]
        part["text"] += text
        if kind == "reasoning":
            out.append(self.event("response.reasoning_text.delta", item_id=item["id"], output_index=self._index(),
                                  content_index=0, delta=text))  # fmt: skip
            return out
        lps = self._logprobs(entries)
        part["logprobs"] += lps
        out.append(self.event("response.output_text.delta", item_id=item["id"], output_index=self._index(),
                              content_index=0, delta=text, logprobs=lps))  # fmt: skip
        return out

    def _begin(self, kind: str) -> list[dict[str, Any]]:
        if kind == "reasoning":
            item: dict[str, Any] = {"id": _id("rs"), "type": "reasoning", "summary": [], "content": [],
                                    "status": "in_progress"}  # fmt: skip
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            item = {"id": _id("msg"), "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        self.items.append(item)
        self.open = item
        added = self.event("response.output_item.added", output_index=self._index(), item=_copy(item))
        item["content"].append(part)
        return [added, self.event("response.content_part.added", item_id=item["id"], output_index=self._index(),
                                  content_index=0, part=_copy(part))]  # fmt: skip

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        item, self.open = self.open, None
        if item is None:
            return []
        part, at = item["content"][0], self.items.index(item)
        item["status"] = status
        where = {"item_id": item["id"], "output_index": at, "content_index": 0}
        if item["type"] == "reasoning":
            done = self.event("response.reasoning_text.done", **where, text=part["text"])
        else:
            done = self.event("response.output_text.done", **where, text=part["text"], logprobs=part["logprobs"])
        return [done, self.event("response.content_part.done", **where, part=_copy(part)),
                self.event("response.output_item.done", output_index=at, item=_copy(item))]  # fmt: skip

    def _call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        fn = call["function"]
        item = {"id": _id("fc"), "type": "function_call", "call_id": call["id"], "name": fn["name"], "arguments": "",
                "status": "in_progress"}  # fmt: skip
        self.items.append(item)
        at = len(self.items) - 1
        out = [self.event("response.output_item.added", output_index=at, item=_copy(item)),
               self.event("response.function_call_arguments.delta", item_id=item["id"], output_index=at,
                          delta=fn["arguments"])]  # fmt: skip
        item["arguments"], item["status"] = fn["arguments"], "completed"
        out.append(self.event("response.function_call_arguments.done", item_id=item["id"], output_index=at,
                              name=fn["name"], arguments=fn["arguments"]))  # fmt: skip
        out.append(self.event("response.output_item.done", output_index=at, item=_copy(item)))
        return out

    def _index(self) -> int:
        return len(self.items) - 1

    def _logprobs(self, entries: list[Any]) -> list[dict[str, Any]]:
        return logprob_entries(self.tok, entries) if self.logprobs else []


def _copy(x: dict[str, Any]) -> dict[str, Any]:
    """A snapshot for an event (the item keeps growing after it is announced)."""
    return {k: ([_copy(v) if isinstance(v, dict) else v for v in val] if isinstance(val, list) else val)
            for k, val in x.items()}  # fmt: skip
