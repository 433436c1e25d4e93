"""Receipts: a verifiable, append-only, hash-chained record of every completed effect.

Each receipt carries ``prev``, the ``receipt_id`` of the receipt before it, and its own ``receipt_id`` is the SHA-256
of its content including ``prev``; the first receipt's ``prev`` is the digest of the log's identity (a random id kept
in the anchor file). So editing a byte, deleting, reordering or inserting a line, or forging one with a recomputed
id breaks the chain at that line. The anchor file ``<log>.head`` (replaced atomically after every append) holds the
identity, the receipt count and the last receipt's id, so removing receipts from the end, or forging the last one,
is detected too. What the chain cannot see: someone who rewrites the log *and* its anchor consistently (there is
no secret key); docs/security.md says so.

On disk: one JSON object per line, sorted keys, default ``", "``/``": "`` separators, ASCII-escaped. A last line
that is incomplete (no final newline, or not JSON) is a torn write: the log is refused with the byte offset, never
appended onto; ``fs-agent receipts repair LOG`` drops it explicitly.
"""

import hashlib
import json
import os
import secrets
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fs_weights.atomic import atomic_output
from fs_weights.jsonfile import parse_json
from fs_weights.regular_file import read_regular

from .protocol import AgentError

FORMAT = "fs-agent-receipts/2"
KEYS = {"receipt_id", "prev", "tool_call_id", "tool", "arguments", "exit_state", "result", "changed_artifacts"}


@dataclass(frozen=True)
class EffectReceipt:
    tool_call_id: str
    tool: str
    arguments: dict[str, Any]
    exit_state: str
    result: str
    changed_artifacts: tuple[str, ...] = ()
    prev: str = field(default="", compare=False)  # set by the store when appended: the chain link

    def __post_init__(self) -> None:
        if not self.tool_call_id or not self.tool:
            raise ValueError("receipt call id and tool must not be empty")
        if self.exit_state not in ("ok", "error"):
            raise ValueError("receipt exit_state must be 'ok' or 'error'")
        object.__setattr__(self, "arguments", dict(self.arguments))
        object.__setattr__(self, "changed_artifacts", tuple(self.changed_artifacts))

    def payload(self) -> dict[str, Any]:
        return {
            "prev": self.prev,
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
            text = ("receipt_id", "prev", "tool_call_id", "tool", "exit_state", "result")
            if not all(isinstance(d[k], str) for k in text):
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
                d["prev"],
            )
        except (TypeError, ValueError):
            raise AgentError("receipt is malformed") from None
        if r.receipt_id != d["receipt_id"]:
            raise AgentError("receipt digest does not match its contents")
        return r


def receipt_line(r: EffectReceipt) -> str:
    """The on-disk JSONL line: sorted keys, default (spaced) separators, ASCII-escaped."""
    return json.dumps(r.to_dict(), sort_keys=True) + "\n"


def genesis(log_id: str) -> str:
    """The ``prev`` of a log's first receipt: binds the chain to this log's identity."""
    return hashlib.sha256(f"{FORMAT}\0{log_id}".encode()).hexdigest()


@dataclass
class ReceiptStore:
    path: Path | None = None
    _receipts: dict[str, EffectReceipt] = field(default_factory=dict, repr=False)
    log_id: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    head: str = field(default="", repr=False)
    count: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        self.head = genesis(self.log_id)
        if self.path is None:
            return
        self.path = Path(self.path)
        if not self.path.exists():
            return
        receipts, anchor = read_log(self.path)
        self.log_id = anchor["log_id"]
        self.head = genesis(self.log_id)
        for n, r in enumerate(receipts, 1):
            if r.prev != self.head:
                raise AgentError(
                    f"{self.path}: receipt {n} ({r.tool_call_id}) does not follow receipt {n - 1}: the log was edited, "
                    "or lines were deleted, reordered or inserted"
                )
            old = self._receipts.get(r.tool_call_id)
            if old is not None:
                raise AgentError(f"{self.path}: tool call id {r.tool_call_id!r} has two receipts")
            self._receipts[r.tool_call_id] = r
            self.head, self.count = r.receipt_id, n
        # The anchor is replaced just after each append, so a crash between the two leaves it one receipt behind.
        behind = bool(receipts) and anchor["count"] == self.count - 1 and receipts[-1].prev == anchor["head"]
        if (anchor["count"], anchor["head"]) != (self.count, self.head) and not behind:
            raise AgentError(
                f"{self.path}: the log holds {self.count} receipts ending {self.head[:12]}, but its anchor "
                f"{anchor_path(self.path).name} records {anchor['count']} ending {anchor['head'][:12]}: receipts were "
                "removed from the end or the last one was changed"
            )
        if behind:
            self._write_anchor()

    def get(self, call_id: str) -> EffectReceipt | None:
        return self._receipts.get(call_id)

    def put(self, receipt: EffectReceipt) -> EffectReceipt:
        old = self._receipts.get(receipt.tool_call_id)
        if old is not None:
            if old == receipt:
                return old
            raise AgentError("tool call id already has a different receipt")
        receipt = replace(receipt, prev=self.head)
        if self.path is not None:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode):
                        raise AgentError(f"{self.path}: not a regular file; a receipt log is appended only to a file")
                    size = st.st_size
                    if size and os.pread(fd, 1, size - 1) != b"\n":  # torn since it was opened: never glue onto it
                        raise AgentError(
                            f"{self.path}: its last line is torn (no final newline); refusing to append onto it - "
                            f"`fs-agent receipts repair {self.path}` drops the torn line"
                        )
                    os.write(fd, receipt_line(receipt).encode("ascii"))  # one write: a kill cannot split it
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as e:
                raise AgentError(f"could not append receipt log: {e}") from None
        self._receipts[receipt.tool_call_id] = receipt
        self.head, self.count = receipt.receipt_id, self.count + 1
        if self.path is not None:
            self._write_anchor()
        return receipt

    def _write_anchor(self) -> None:
        assert self.path is not None
        body = {"format": FORMAT, "log_id": self.log_id, "count": self.count, "head": self.head}
        target = anchor_path(self.path)
        with atomic_output(target, mode=0o600, durable=True, error=AgentError) as f:
            f.write((json.dumps(body, sort_keys=True) + "\n").encode("ascii"))

    def __contains__(self, call_id: str) -> bool:
        return call_id in self._receipts

    def all(self) -> list[EffectReceipt]:
        return list(self._receipts.values())


def anchor_path(log: Path) -> Path:
    return log.with_name(log.name + ".head")


def read_log(path: Path) -> tuple[list[EffectReceipt], dict[str, Any]]:
    """Every receipt of the log at ``path`` and its anchor, or an ``AgentError`` naming the line and byte offset."""
    data = read_regular(path, AgentError, limit=1 << 30)  # a FIFO or device named as the log is refused, not read
    receipts, offset = [], 0
    for n, line in enumerate(data.splitlines(keepends=True), 1):
        where = f"{path}: line {n} (byte offset {offset})"
        if not line.endswith(b"\n"):
            raise AgentError(
                f"{where} is torn (no final newline): the last append did not finish. Refusing to append onto it; "
                f"`fs-agent receipts repair {path}` drops the torn line"
            )
        receipts.append(EffectReceipt.from_dict(parse_json(line, where, AgentError, unique_keys=True)))
        offset += len(line)
    anchor = read_anchor(path) if receipts or anchor_path(path).exists() else None
    if anchor is None:
        anchor = {"log_id": secrets.token_hex(16), "count": 0, "head": ""}
        anchor["head"] = genesis(anchor["log_id"])
    return receipts, anchor


def read_anchor(path: Path) -> dict[str, Any]:
    a = anchor_path(path)
    if not a.exists():
        raise AgentError(f"{path}: its anchor {a.name} is missing; the log cannot be verified")
    try:
        d = parse_json(a.read_bytes(), str(a), AgentError)
    except OSError as e:
        raise AgentError(f"{a}: cannot read: {e.strerror or e}") from None
    ok = (
        isinstance(d, dict)
        and d.get("format") == FORMAT
        and isinstance(d.get("log_id"), str)
        and type(d.get("count")) is int
        and d["count"] >= 0
        and isinstance(d.get("head"), str)
    )
    if not ok:
        raise AgentError(f"{a}: not a receipt-log anchor ({FORMAT})")
    return d


def repair_log(path: Path) -> int:
    """Drop a torn last line (the only repair there is); returns the bytes removed. Anything else is refused."""
    data = path.read_bytes()
    keep = data[: data.rfind(b"\n") + 1]
    if len(keep) == len(data):
        return 0
    with atomic_output(path, mode=0o600, durable=True, error=AgentError) as f:
        f.write(keep)
    ReceiptStore(path)  # what is left must verify
    return len(data) - len(keep)
