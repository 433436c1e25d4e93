"""Checkpoints of a paused run - the conversation, the model's cached prefix, and an identity digest."""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fs_weights.atomic import atomic_output

from .protocol import AgentError

ROLES = ("system", "user", "assistant")


def _nonneg_int(x: Any) -> bool:
    return type(x) is int and x >= 0


@dataclass(frozen=True)
class ModelCheckpoint:
    conversation_position: int
    response_index: int
    cached_token_ids: tuple[int, ...]
    layer_offsets: tuple[int, ...]

    def __post_init__(self) -> None:
        if not _nonneg_int(self.conversation_position) or not _nonneg_int(self.response_index):
            raise AgentError("checkpoint positions must be non-negative integers")
        if not isinstance(self.cached_token_ids, tuple) or not all(_nonneg_int(t) for t in self.cached_token_ids):
            raise AgentError("cached token ids must be non-negative integers")
        offsets = self.layer_offsets
        if not isinstance(offsets, tuple) or not offsets or not all(_nonneg_int(o) for o in offsets):
            raise AgentError("checkpoint needs non-negative layer offsets")
        if any(o != len(self.cached_token_ids) for o in offsets):
            raise AgentError("layer offsets must match the cached token prefix")

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation_position": self.conversation_position,
            "response_index": self.response_index,
            "cached_token_ids": list(self.cached_token_ids),
            "layer_offsets": list(self.layer_offsets),
        }


@dataclass(frozen=True)
class AgentCheckpoint:
    checkpoint_id: str
    task: str
    messages: tuple[tuple[str, str], ...]
    model: ModelCheckpoint

    def validate(self) -> None:
        if not isinstance(self.task, str) or not self.task.strip():
            raise AgentError("checkpoint task must not be empty")
        if (
            not isinstance(self.messages, tuple)
            or not self.messages
            or not all(
                isinstance(m, tuple) and len(m) == 2 and m[0] in ROLES and isinstance(m[1], str) for m in self.messages
            )
        ):
            raise AgentError("checkpoint messages are invalid")
        if not isinstance(self.model, ModelCheckpoint) or self.model.conversation_position != len(self.messages):
            raise AgentError("model checkpoint does not match the conversation")
        if self.checkpoint_id != checkpoint_identity(self.task, self.messages, self.model):
            raise AgentError("checkpoint identity does not match its content")

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


def canonical(payload: Any) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")


def checkpoint_identity(task: str, messages: tuple[tuple[str, str], ...], model: ModelCheckpoint) -> str:
    payload = {"task": task, "messages": [[r, c] for r, c in messages], "model": model.to_dict()}
    return hashlib.sha256(canonical(payload)).hexdigest()


def create_checkpoint(task: str, messages: list[dict[str, str]], model: ModelCheckpoint) -> AgentCheckpoint:
    if not isinstance(model, ModelCheckpoint):
        raise AgentError("model checkpoint is invalid")
    try:
        pairs = tuple((m["role"], m["content"]) for m in messages)
    except (KeyError, TypeError):
        raise AgentError("checkpoint messages are invalid") from None
    try:
        identity = checkpoint_identity(task, pairs, model)
    except (TypeError, ValueError):
        raise AgentError("checkpoint messages are invalid") from None
    cp = AgentCheckpoint(identity, task, pairs, model)
    cp.validate()
    return cp


def save_agent_checkpoint(cp: AgentCheckpoint, path: Any) -> None:
    """Persist a checkpoint as its canonical identity JSON plus the id (atomic write)."""
    target = Path(path)
    body = {
        "checkpoint_id": cp.checkpoint_id,
        "task": cp.task,
        "messages": [list(m) for m in cp.messages],
        "model": cp.model.to_dict(),
    }
    with atomic_output(target, mode=0o600, error=AgentError) as f:
        f.write(json.dumps(body, sort_keys=True, indent=2).encode("utf-8"))


def load_agent_checkpoint(path: Any) -> AgentCheckpoint:
    """Read a checkpoint file and re-verify its identity."""

    from fs_weights.jsonfile import read_json

    d = read_json(path, AgentError)
    try:
        model = ModelCheckpoint(
            d["model"]["conversation_position"],
            d["model"]["response_index"],
            tuple(d["model"]["cached_token_ids"]),
            tuple(d["model"]["layer_offsets"]),
        )
        cp = AgentCheckpoint(d["checkpoint_id"], d["task"], tuple(tuple(m) for m in d["messages"]), model)
    except (ValueError, KeyError, TypeError) as e:
        raise AgentError(f"{path}: not a valid checkpoint: {type(e).__name__}: {e}") from None
    try:
        cp.validate()
    except UnicodeError:
        raise AgentError(f"{path}: checkpoint text holds an unpaired surrogate") from None
    return cp
