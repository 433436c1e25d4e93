"""The tool protocol. A model's whole response is exactly one JSON object: a final answer or a tool call."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Message = dict[str, str]


class AgentError(ValueError):
    """A recoverable error the model caused; the loop shows it to the model as ``error: <message>``."""


@dataclass(frozen=True)
class FinalAction:
    final: str


@dataclass(frozen=True)
class ToolAction:
    tool: str
    arguments: dict[str, Any]


TOOL_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "list_files": (frozenset(), frozenset({"path"})),
    "read_file": (frozenset({"path"}), frozenset()),
    "write_file": (frozenset({"path", "content"}), frozenset()),
    "edit_file": (frozenset({"path", "old", "new"}), frozenset()),
    "run_command": (frozenset({"argv"}), frozenset()),
}


def check_text(value: Any, what: str) -> None:
    """Refuse a lone surrogate anywhere in ``value`` (JSON's ``"\\ud800"`` decodes to one): it cannot be written as
    UTF-8, so it would otherwise crash the first encode deep inside an effect."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise AgentError(f"{what} holds an unpaired surrogate at index {e.start} (not valid Unicode)") from None
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)


def parse_action(response: str, available_tools: Any = None) -> FinalAction | ToolAction:
    try:
        data = json.loads(response)
    except (json.JSONDecodeError, TypeError) as e:
        raise AgentError(f"response is not valid JSON: {e}") from None
    except RecursionError:
        raise AgentError("response is JSON nested too deeply") from None
    check_text(data, "response")
    if not isinstance(data, dict):
        raise AgentError("response must be a JSON object")
    if "final" in data:
        if set(data) != {"final"} or not isinstance(data["final"], str):
            raise AgentError("final action must contain only a string 'final' field")
        if not data["final"].strip():
            raise AgentError("final response must not be empty")
        return FinalAction(data["final"])
    tool = data.get("tool")
    if not isinstance(tool, str):
        raise AgentError("tool action requires a string 'tool' field")
    if tool not in TOOL_FIELDS:
        raise AgentError(f"unknown tool: {tool}")
    if available_tools is not None and tool not in available_tools:
        raise AgentError(f"tool is not enabled: {tool}")
    required, optional = TOOL_FIELDS[tool]
    args = {k: v for k, v in data.items() if k != "tool"}
    missing = sorted(required - set(args))
    if missing:
        raise AgentError(f"missing fields for {tool}: {', '.join(missing)}")
    extra = sorted(set(args) - required - optional)
    if extra:
        raise AgentError(f"unexpected fields for {tool}: {', '.join(extra)}")
    if "path" in args and not isinstance(args["path"], str):
        raise AgentError("path must be a string")
    for name in ("content", "old", "new"):
        if name in args and not isinstance(args[name], str):
            raise AgentError(f"{name} must be a string")
    if tool == "run_command":
        argv = args["argv"]
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
            raise AgentError("argv must be a non-empty array of non-empty strings")
    return ToolAction(tool, args)


def action_json(action: ToolAction) -> str:
    """Compact sorted-key JSON of ``{"tool": ..., **arguments}`` (signatures, status cards)."""
    return json.dumps({"tool": action.tool, **action.arguments}, sort_keys=True, separators=(",", ":"))


def action_schema(
    available_tools: Any = None,
    final: bool = True,
    files: Sequence[str] | None = None,
    dirs: Sequence[str] | None = None,
    commands: Sequence[Sequence[str]] | None = None,
) -> dict[str, Any]:
    """``parse_action``'s rules as a JSON schema - one final answer or one call to an enabled tool - so the next
    action can be decoded under it (constrained decoding) and cannot fail to parse. ``final=False``: a tool call
    only (OpenAI's ``tool_choice="required"``). ``files`` / ``dirs`` / ``commands``, where given, narrow what the
    tools can name to what exists: ``read_file`` and ``edit_file`` one of ``files``, ``list_files`` one of ``dirs``,
    ``run_command`` one of ``commands``; a tool left nothing to name is left out (``write_file`` stays free: it
    creates files)."""
    text: dict[str, Any] = {"type": "string"}
    fields: dict[str, Any] = {"path": text, "content": text, "old": text, "new": text}
    fields["argv"] = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
    named: dict[str, dict[str, Any]] = {}  # tool -> its narrowed field
    if files is not None:
        named["read_file"] = named["edit_file"] = {"path": {"enum": sorted(files)}}
    if dirs is not None:
        named["list_files"] = {"path": {"enum": sorted({".", *dirs})}}
    if commands is not None:
        named["run_command"] = {"argv": {"anyOf": [{"const": list(c)} for c in commands]}}
    alts: list[dict[str, Any]] = []
    if final:
        answer = {"type": "string", "minLength": 1}
        alts.append(
            {"type": "object", "properties": {"final": answer}, "required": ["final"], "additionalProperties": False}
        )
    for tool, (required, optional) in TOOL_FIELDS.items():
        if available_tools is not None and tool not in available_tools:
            continue
        narrowed = named.get(tool, {})
        if any(f in ({"enum": []}, {"anyOf": []}) for f in narrowed.values()):
            continue  # nothing it could name exists
        props = {"tool": {"const": tool}, **{f: narrowed.get(f, fields[f]) for f in sorted(required | optional)}}
        alts.append(
            {
                "type": "object",
                "properties": props,
                "required": ["tool", *sorted(required)],
                "additionalProperties": False,
            }
        )
    if not alts:
        raise AgentError("no action is possible: no final answer and no tool with anything to name")
    return {"anyOf": alts}
