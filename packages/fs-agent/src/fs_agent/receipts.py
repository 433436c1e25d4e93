"""Receipts: a verifiable, append-only record of every completed effect."""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .protocol import AgentError

KEYS = {"receipt_id", "tool_call_id", "tool", "arguments", "exit_state", "result", "changed_artifacts"}


@dataclass(frozen=True)
class EffectReceipt:
    tool_call_id: str
    tool: str
    arguments: dict[str, Any]
    exit_state: str
    result: str
    changed_artifacts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.tool_call_id or not self.tool:
            raise ValueError("receipt call id and tool must not be empty")
        if self.exit_state not in ("ok", "error"):
            raise ValueError("receipt exit_state must be 'ok' or 'error'")
        object.__setattr__(self, "arguments", dict(self.arguments))
        object.__setattr__(self, "changed_artifacts", tuple(self.changed_artifacts))

    def payload(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "exit_state": self.exit_state,
            "result": self.result,
            "changed_artifacts": list(self.changed_artifacts),
        }

    @property
    def receipt_id(self) -> str:
        return hashlib.sha256(json.dumps(self.payload(), sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"receipt_id": self.receipt_id, **self.payload()}

    @classmethod
    def from_dict(cls, d: Any) -> "EffectReceipt":
        if not isinstance(d, dict) or set(d) != KEYS:
            raise AgentError("receipt is malformed")
        try:
            if not all(isinstance(d[k], str) for k in ("receipt_id", "tool_call_id", "tool", "exit_state", "result")):
                raise TypeError
            if not isinstance(d["arguments"], dict) or not isinstance(d["changed_artifacts"], list):
                raise TypeError
            if not all(isinstance(a, str) for a in d["changed_artifacts"]):
                raise TypeError
            r = cls(
                d["tool_call_id"],
                d["tool"],
                d["arguments"],
                d["exit_state"],
                d["result"],
                tuple(d["changed_artifacts"]),
            )
        except (TypeError, ValueError):
            raise AgentError("receipt is malformed") from None
        if r.receipt_id != d["receipt_id"]:
            raise AgentError("receipt digest does not match its contents")
        return r


def receipt_line(r: EffectReceipt) -> str:
    """The on-disk JSONL line: sorted keys, default (spaced) separators, ASCII-escaped."""
    return json.dumps(r.to_dict(), sort_keys=True) + "\n"


@dataclass
class ReceiptStore:
    path: Path | None = None
    _receipts: dict[str, EffectReceipt] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.path is None:
            return
        self.path = Path(self.path)
        if not self.path.exists():
            return
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as e:
            raise AgentError(f"could not load receipt log: {e}") from None
        for line in text.splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError as e:
                raise AgentError(f"could not load receipt log: {e}") from None
            r = EffectReceipt.from_dict(data)
            old = self._receipts.get(r.tool_call_id)
            if old is not None and old != r:
                raise AgentError("tool call id has conflicting receipts")
            self._receipts[r.tool_call_id] = r

    def get(self, call_id: str) -> EffectReceipt | None:
        return self._receipts.get(call_id)

    def put(self, receipt: EffectReceipt) -> EffectReceipt:
        old = self._receipts.get(receipt.tool_call_id)
        if old is not None:
            if old == receipt:
                return old
            raise AgentError("tool call id already has a different receipt")
        if self.path is not None:
            try:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(receipt_line(receipt))
            except OSError as e:
                raise AgentError(f"could not append receipt log: {e}") from None
        self._receipts[receipt.tool_call_id] = receipt
        return receipt

    def __contains__(self, call_id: str) -> bool:
        return call_id in self._receipts

    def all(self) -> list[EffectReceipt]:
        return list(self._receipts.values())
