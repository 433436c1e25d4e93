"""Replace old, receipt-backed tool observations with compact evidence records to save context."""

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .loop import TOOL_RESULT
from .protocol import Message
from .receipts import EffectReceipt

COMPACT_PREFIX = "Completed tool interaction (compacted evidence):\n"


@dataclass(frozen=True)
class CompactionResult:
    messages: tuple[Message, ...]
    compacted_interactions: int
    tokens_before: int
    tokens_after: int
    receipt_ids: tuple[str, ...]

    @property
    def saved_tokens(self) -> int:
        return self.tokens_before - self.tokens_after


def _count(count_tokens: Callable[[list[Message]], Any], messages: list[Message]) -> int:
    n = count_tokens(messages)
    if type(n) is not int or n < 0:
        raise ValueError("count_tokens must return a non-negative integer")
    return n


def _preview(result: str, n: int) -> str:
    return result if len(result) <= n else f"{result[:n]}… [{len(result) - n} chars omitted]"


def compact_completed_interactions(
    messages: list[Message],
    receipts: Any,
    count_tokens: Callable[[list[Message]], Any],
    *,
    keep_recent: int = 1,
    result_preview_chars: int = 160,
) -> CompactionResult:
    if type(keep_recent) is not int or keep_recent < 0:
        raise ValueError("keep_recent must be a non-negative integer")
    if type(result_preview_chars) is not int or result_preview_chars <= 0:
        raise ValueError("result_preview_chars must be a positive integer")
    if not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
    ):
        raise ValueError("messages must contain string role and content fields")
    receipts = list(receipts)
    if not all(isinstance(r, EffectReceipt) for r in receipts):
        raise ValueError("receipts must contain EffectReceipt values")
    original = copy.deepcopy(list(messages))
    before = _count(count_tokens, copy.deepcopy(original))
    used: set[int] = set()
    matches: list[tuple[int, EffectReceipt]] = []
    for i in range(len(original) - 1):
        a, u = original[i], original[i + 1]
        if a["role"] != "assistant" or u["role"] != "user" or not u["content"].startswith(TOOL_RESULT):
            continue
        try:
            data = json.loads(a["content"])
        except (json.JSONDecodeError, RecursionError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("tool"), str):
            continue
        args = {k: v for k, v in data.items() if k != "tool"}
        result = u["content"][len(TOOL_RESULT) :]
        for j, r in enumerate(receipts):
            if j not in used and r.tool == data["tool"] and r.arguments == args and r.result == result:
                used.add(j)
                matches.append((i + 1, r))
                break
    selected = matches[: max(0, len(matches) - keep_recent)]
    if not selected:
        return CompactionResult(tuple(original), 0, before, before, ())
    compacted = copy.deepcopy(original)
    for idx, r in selected:
        record = {
            "arguments": r.arguments,
            "changed_artifacts": list(r.changed_artifacts),
            "exit_state": r.exit_state,
            "receipt_id": r.receipt_id,
            "result_preview": _preview(r.result, result_preview_chars),
            "tool": r.tool,
        }
        compacted[idx] = {
            "role": "user",
            "content": COMPACT_PREFIX + json.dumps(record, sort_keys=True, separators=(",", ":")),
        }
    after = _count(count_tokens, copy.deepcopy(compacted))
    if after >= before:
        return CompactionResult(tuple(original), 0, before, before, ())
    return CompactionResult(tuple(compacted), len(selected), before, after, tuple(r.receipt_id for _, r in selected))
