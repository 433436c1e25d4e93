"""Inspect a paused run at a tool boundary and resume it with operator steering."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .checkpoint import AgentCheckpoint
from .loop import TOOL_RESULT, AgentEvent, AgentLimits, AgentRun, _continue, restore_generator
from .protocol import AgentError, FinalAction, ToolAction, action_json, parse_action

STEERING_PREFIX = "Operator steering:\n"


@dataclass(frozen=True)
class AgentStatus:
    task: str
    last_action: str
    last_evidence: str
    next_step: str


def _boundary(checkpoint: AgentCheckpoint) -> tuple[ToolAction, str]:
    checkpoint.validate()
    m = checkpoint.messages
    if len(m) < 2 or m[-2][0] != "assistant" or m[-1][0] != "user" or not m[-1][1].startswith(TOOL_RESULT):
        raise AgentError("checkpoint does not end at a complete tool observation")
    try:
        action = parse_action(m[-2][1])
    except AgentError as e:
        raise AgentError(f"checkpoint tool action is invalid: {e}") from None
    if isinstance(action, FinalAction):
        raise AgentError("checkpoint tool action is invalid: expected a tool action")
    return action, m[-1][1][len(TOOL_RESULT) :]


def inspect_checkpoint(checkpoint: AgentCheckpoint, *, evidence_chars: int = 160) -> AgentStatus:
    if type(evidence_chars) is not int or evidence_chars <= 0:
        raise ValueError("evidence_chars must be a positive integer")
    action, evidence = _boundary(checkpoint)
    if len(evidence) > evidence_chars:
        evidence = "…" if evidence_chars == 1 else evidence[: evidence_chars - 1] + "…"
    return AgentStatus(
        checkpoint.task,
        action_json(action),
        evidence,
        f"resume the model after the completed {action.tool} observation",
    )


def resume_with_steering(
    checkpoint: AgentCheckpoint,
    steering: str,
    generate: Any,
    workspace: Any,
    limits: AgentLimits | None = None,
    on_event: Callable[[AgentEvent], None] | None = None,
) -> AgentRun:
    if not isinstance(steering, str) or not steering.strip():
        raise ValueError("steering must not be empty")
    _boundary(checkpoint)
    messages = restore_generator(checkpoint, generate)
    messages.insert(checkpoint.model.conversation_position, {"role": "user", "content": STEERING_PREFIX + steering})
    run, _ = _continue(messages, generate, workspace, limits or AgentLimits(), on_event)
    assert run is not None
    return run
