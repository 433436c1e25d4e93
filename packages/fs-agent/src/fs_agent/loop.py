"""The agent loop (validate, execute, observe, repeat), run-to-checkpoint and resume."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .checkpoint import AgentCheckpoint, ModelCheckpoint, create_checkpoint
from .generation import initial_messages
from .protocol import AgentError, FinalAction, Message, ToolAction, parse_action

TOOL_RESULT = "Tool result:\n"


@dataclass(frozen=True)
class AgentLimits:
    max_steps: int = 8
    max_context_chars: int = 48_000
    max_invalid_actions: int = 3
    max_identical_actions: int = 2

    def __post_init__(self) -> None:
        for v in (self.max_steps, self.max_context_chars, self.max_invalid_actions, self.max_identical_actions):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError("agent limits must be positive")


@dataclass(frozen=True)
class AgentEvent:
    step: int
    response: str
    action: FinalAction | ToolAction | None
    result: str | None


@dataclass(frozen=True)
class AgentRun:
    completed: bool
    reason: str
    final: str | None
    events: tuple[AgentEvent, ...]
    modified_files: tuple[str, ...] = ()


def build_system_prompt(workspace: Any) -> str:
    tools = workspace.available_tools
    lines = [
        "You are a coding agent working in a local workspace. Inspect files before editing them.",
        "Reply with exactly one JSON object and nothing else: no markdown, no prose.",
        'When the task is done, reply {"final":"brief summary"}.',
        "Available actions:",
    ]
    examples = {
        "list_files": '{"tool":"list_files","path":"."}',
        "read_file": '{"tool":"read_file","path":"README.md"}',
        "write_file": '{"tool":"write_file","path":"hello.py","content":"..."}',
        "edit_file": '{"tool":"edit_file","path":"hello.py","old":"...","new":"..."}',
        "run_command": '{"tool":"run_command","argv":["exact","arguments"]}',
    }
    lines += [examples[t] for t in examples if t in tools]
    if {"write_file", "edit_file"} & set(tools):
        lines.append("Always read an existing file before changing it.")
    commands = getattr(workspace.policy, "allowed_commands", ())
    if "run_command" in tools and commands:
        lines.append("Only these exact argv arrays are allowed for run_command:")
        lines += [json.dumps(list(c), separators=(",", ":")) for c in commands]
    lines.append("Paths are relative to the workspace root. Keep changes small. Never invent file contents.")
    return "\n".join(lines)


def _append_tool_result(messages: list[Message], response: str, result: str) -> list[Message]:
    return [*messages, {"role": "assistant", "content": response}, {"role": "user", "content": TOOL_RESULT + result}]


def _continue(
    messages: list[Message],
    generate: Callable[[list[Message]], str],
    workspace: Any,
    limits: AgentLimits,
    on_event: Callable[[AgentEvent], None] | None = None,
    checkpoint_after: int | None = None,
) -> tuple[AgentRun | None, list[Message]]:
    """The shared loop. With ``checkpoint_after`` it returns ``(None, messages)`` right after that many executed
    tool calls (at a tool boundary) instead of running on."""
    import sys

    events: list[AgentEvent] = []
    invalid = identical = tool_calls = 0
    last_signature: str | None = None
    append = sys.modules[__name__]._append_tool_result  # looked up each time: a monkeypatchable seam

    def record(event: AgentEvent) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    for step in range(1, limits.max_steps + 1):
        if sum(len(m["content"]) for m in messages) > limits.max_context_chars:
            return AgentRun(False, "context_limit", None, tuple(events)), messages
        response = generate(messages)
        try:
            action = parse_action(response, workspace.available_tools)
        except AgentError as e:
            invalid += 1
            identical, last_signature = 0, None
            result = f"error: {e}"
            record(AgentEvent(step, response, None, result))
            if invalid >= limits.max_invalid_actions:
                return AgentRun(False, "invalid_action_limit", None, tuple(events)), messages
            messages = append(messages, response, result)
            continue
        if isinstance(action, FinalAction):
            record(AgentEvent(step, response, action, None))
            return AgentRun(True, "completed", action.final, tuple(events)), messages
        signature = json.dumps({"tool": action.tool, **action.arguments}, sort_keys=True)
        identical = identical + 1 if signature == last_signature else 1
        last_signature = signature
        if identical > limits.max_identical_actions:
            record(AgentEvent(step, response, action, "error: identical action loop detected"))
            return AgentRun(False, "repeated_action_limit", None, tuple(events)), messages
        result = workspace.execute(action)
        record(AgentEvent(step, response, action, result))
        messages = append(messages, response, result)
        tool_calls += 1
        if checkpoint_after is not None and tool_calls == checkpoint_after:
            return None, messages
    return AgentRun(False, "step_limit", None, tuple(events)), messages


def run_agent(
    task: str,
    generate: Callable[[list[Message]], str],
    workspace: Any,
    limits: AgentLimits | None = None,
    on_event: Callable[[AgentEvent], None] | None = None,
) -> AgentRun:
    messages = initial_messages(task, build_system_prompt(workspace))
    run, _ = _continue(messages, generate, workspace, limits or AgentLimits(), on_event)
    assert run is not None
    return run


def run_to_checkpoint(
    task: str,
    generate: Any,
    workspace: Any,
    after_tool_calls: int = 1,
    limits: AgentLimits | None = None,
    on_event: Callable[[AgentEvent], None] | None = None,
) -> AgentCheckpoint:
    if type(after_tool_calls) is not int or after_tool_calls <= 0:
        raise ValueError("after_tool_calls must be a positive integer")
    messages = initial_messages(task, build_system_prompt(workspace))
    run, messages = _continue(messages, generate, workspace, limits or AgentLimits(), on_event, after_tool_calls)
    if run is not None:
        raise AgentError(f"run ended before checkpoint: {run.reason}")
    save = getattr(generate, "save_checkpoint", None)
    if save is None:
        raise AgentError("generator does not support checkpoints")
    state = save(messages)
    if not isinstance(state, ModelCheckpoint):
        raise AgentError("generator returned an invalid model checkpoint")
    return create_checkpoint(task, messages, state)


def restore_generator(checkpoint: AgentCheckpoint, generate: Any) -> list[Message]:
    restore = getattr(generate, "restore_checkpoint", None)
    if restore is None:
        raise AgentError("generator does not support checkpoint restore")
    restore(checkpoint.model)
    return checkpoint.message_dicts()


def resume_agent(
    checkpoint: AgentCheckpoint, generate: Any, workspace: Any, limits: AgentLimits | None = None
) -> AgentRun:
    checkpoint.validate()
    messages = restore_generator(checkpoint, generate)
    run, _ = _continue(messages, generate, workspace, limits or AgentLimits())
    assert run is not None
    return run
