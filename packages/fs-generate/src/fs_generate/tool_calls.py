"""Qwen3's output conventions, parsed: ``<think>`` reasoning, text, and ``<tool_call>{json}</tool_call>`` blocks.

Qwen3 (its chat template, like Hermes') asks for tool calls as ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n
</tool_call>``: possibly several, possibly after some text or a ``<think>…</think>`` block. ``<tool_call>`` and
``<think>`` are added tokens, and they decode to exactly that text. The parser works on decoded text and is
incremental, so a server can stream it:

    p = OutputParser()
    for step in stream:
        for kind, value in p.feed(step.text): ...   # ("reasoning" | "content", str) or ("tool_call", ToolCall)
    for kind, value in p.close(): ...               # whatever was held back

Text that might be the start of a tag (``"<tool"`` at the end of a delta) is held back until the next delta says
what it is, so tags never leak into content. A block whose JSON is not ``{"name": str, "arguments": object}`` becomes
an ``("invalid_tool_call", raw text)`` event (the caller decides: an error, or content). ``parse_output(text)`` is the
whole-text form. ``tool_call_grammar(tools)`` is the Lark grammar that forces one well-formed call to one of the named
tools (``tool_choice: "required"`` or a named function), the tag tokens named by id.
"""

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .strict_schema import close_objects

THINK, END_THINK, CALL, END_CALL = "<think>", "</think>", "<tool_call>", "</tool_call>"
TAGS = (THINK, END_THINK, CALL, END_CALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    raw: str  # the JSON text between the tags, as generated

    @property
    def arguments_json(self) -> str:
        """The arguments as compact JSON text (OpenAI's ``function.arguments`` is a string)."""
        return json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"))


@dataclass
class ParsedOutput:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)


def _tool_call(raw: str) -> ToolCall | None:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    args = data.get("arguments", {})
    if isinstance(args, str):  # some models emit the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict) or set(data) - {"name", "arguments"}:
        return None
    return ToolCall(data["name"], args, raw)


PARTIAL = re.compile(r'\s*\{"name":"((?:[^"\\]|\\.)*)"?(?:,"arguments":(.*))?', re.DOTALL)


def partial_call(raw: str) -> tuple[str, str]:
    """(name, arguments text) of a call the token budget cut short, as far as it got. The forced-call grammar writes
    compact ``{"name":"f","arguments":{...}}``, so the arguments are the text after ``"arguments":`` (an incomplete
    JSON object, as OpenAI streams one)."""
    m = PARTIAL.match(raw)
    return (m.group(1), m.group(2) or "") if m else ("", "")


class OutputParser:
    def __init__(self, in_reasoning: bool = False, tool_calls: bool = True):
        """``in_reasoning``: the prompt already opened ``<think>`` (the model's text starts inside it).
        ``tool_calls=False``: ``<tool_call>`` is plain content (no tools were offered)."""
        self.openings = (THINK, CALL) if tool_calls else (THINK,)
        self.state = "reasoning" if in_reasoning else "content"  # | "call"
        self.buf = ""  # text not yet emitted: a possible tag prefix, or a tool call's body
        self._pending = ""  # a tool call's body, found with its closing tag

    def feed(self, delta: str) -> Iterator[tuple[str, Any]]:
        self.buf += delta
        while True:
            closing = {"reasoning": END_THINK, "call": END_CALL, "content": None}[self.state]
            opening = [t for t in self.openings if self.state == "content"]
            wanted = [closing] if closing else opening
            hits = [(self.buf.find(t), t) for t in wanted if t in self.buf]
            if hits:
                at, tag = min(hits)
                yield from self._text(self.buf[:at])
                self.buf = self.buf[at + len(tag) :]
                self.state = {THINK: "reasoning", CALL: "call", END_THINK: "content", END_CALL: "content"}[tag]
                if tag == END_CALL:
                    yield from self._call(self._pending)
                continue
            if self.state == "call":  # the body waits for its closing tag
                return
            keep = _partial_tag(self.buf, wanted)
            yield from self._text(self.buf[: len(self.buf) - keep])
            self.buf = self.buf[len(self.buf) - keep :]
            return

    def _text(self, text: str) -> Iterator[tuple[str, Any]]:
        if self.state == "call":
            self._pending = text
        elif text:
            yield (self.state, text)

    def _call(self, raw: str) -> Iterator[tuple[str, Any]]:
        self._pending = ""
        call = _tool_call(raw.strip())
        yield ("tool_call", call) if call is not None else ("invalid_tool_call", raw)

    def close(self) -> Iterator[tuple[str, Any]]:
        """The end of the output: held-back text, and an unclosed tool call as invalid."""
        rest, self.buf = self.buf, ""
        if self.state == "call":
            yield ("invalid_tool_call", rest)
        elif rest:
            yield (self.state, rest)


def _partial_tag(text: str, tags: Sequence[str]) -> int:
    """How many trailing characters of ``text`` could begin one of ``tags``."""
    for n in range(min(len(text), max(map(len, tags), default=0) - 1), 0, -1):
        if any(t.startswith(text[-n:]) for t in tags):
            return n
    return 0


def parse_output(text: str, in_reasoning: bool = False) -> ParsedOutput:
    out = ParsedOutput()
    p = OutputParser(in_reasoning)
    for kind, value in [*p.feed(text), *p.close()]:
        if kind == "content":
            out.content += value
        elif kind == "reasoning":
            out.reasoning += value
        elif kind == "tool_call":
            out.tool_calls.append(value)
        else:
            out.invalid.append(value)
    out.content = out.content.strip() if out.tool_calls else out.content
    return out


def tool_call_grammar(tools: Sequence[dict[str, Any]], call_token: int, end_token: int) -> str:
    """Lark: exactly one ``<tool_call>{"name": <one of tools>, "arguments": <its parameters>}</tool_call>``, the
    tags as the tokens ``call_token`` / ``end_token`` (added tokens: text that spells them is other tokens)."""
    if not tools:
        raise ValueError("a tool call grammar needs at least one tool")
    alts = []
    for t in tools:
        fn = t.get("function", t)
        name, params = fn.get("name"), fn.get("parameters") or {"type": "object"}
        if not isinstance(name, str) or not name:
            raise ValueError(f"every tool needs a function name, got {fn!r}")
        schema = {
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": close_objects(params)},  # strict, as schemas are
            "required": ["name", "arguments"],
            "additionalProperties": False,
            "x-guidance": {"whitespace_flexible": False},  # compact JSON, as constraints.py compiles schemas
        }
        alts.append(f"%json {json.dumps(schema)}")
    body = "\n    | ".join(alts)
    return f'start: <[{call_token}]> "\\n" call "\\n" <[{end_token}]>\ncall: {body}\n'
