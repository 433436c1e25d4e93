"""A confined workspace whose effects need approval and leave receipts."""

import hashlib
import math
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .protocol import AgentError, ToolAction
from .receipts import EffectReceipt, ReceiptStore

PROTECTED = {".aws", ".env", ".git", ".ssh", "credentials", "id_ed25519", "id_rsa"}
MAX_COMMAND_OUTPUT = 16_000


def _int(x: Any) -> bool:
    return type(x) is int


@dataclass(frozen=True)
class ToolPolicy:
    root: Path
    max_file_bytes: int = 65536
    max_list_entries: int = 200
    allow_writes: bool = False
    allowed_commands: tuple[tuple[str, ...], ...] = ()
    max_write_bytes: int = 65536
    command_timeout_seconds: float = 30.0

    def __post_init__(self) -> None:
        root = Path(self.root)
        if root.is_symlink():
            raise ValueError("workspace root must not be a symlink")
        try:
            resolved = root.resolve(strict=True)
        except (OSError, RuntimeError):
            raise ValueError("workspace root must exist") from None
        if not resolved.is_dir():
            raise ValueError("workspace root must be a directory")
        for v in (self.max_file_bytes, self.max_list_entries, self.max_write_bytes):
            if not _int(v) or v <= 0:
                raise ValueError("workspace limits must be positive integers")
        if type(self.allow_writes) is not bool:
            raise ValueError("allow_writes must be a boolean")
        t = self.command_timeout_seconds
        if type(t) not in (int, float) or t <= 0 or not math.isfinite(t):
            raise ValueError("command timeout must be finite and positive")
        if not isinstance(self.allowed_commands, tuple) or not all(isinstance(c, tuple) for c in self.allowed_commands):
            raise ValueError("allowed commands must be a tuple of tuples")
        if not all(c and all(isinstance(a, str) and a and "\0" not in a for a in c) for c in self.allowed_commands):
            raise ValueError("allowed commands must contain non-empty strings without NUL")
        object.__setattr__(self, "root", resolved)


@dataclass(frozen=True)
class ApprovalDecision:
    approved: bool
    reason: str = ""

    def __post_init__(self) -> None:
        if type(self.approved) is not bool:
            raise ValueError("approved must be a boolean")
        if not isinstance(self.reason, str):
            raise ValueError("approval reason must be a string")
        if not self.approved and not self.reason.strip():
            raise ValueError("a denial requires a nonblank operator reason")


def is_protected(name: str) -> bool:
    n = name.lower()
    return n in PROTECTED or n.startswith(".env.") or n.endswith((".key", ".pem"))


@dataclass
class Workspace:
    policy: ToolPolicy
    confirm_tool: Callable[[ToolAction], Any] | None = None
    receipt_store: ReceiptStore = field(default_factory=ReceiptStore)
    _observed: dict[str, str] = field(default_factory=dict, repr=False)
    _modified: set[str] = field(default_factory=set, repr=False)
    _next_call: int = field(default=1, repr=False)

    @property
    def available_tools(self) -> frozenset[str]:
        tools = {"list_files", "read_file"}
        if self.policy.allow_writes:
            tools |= {"write_file", "edit_file"}
        if self.policy.allowed_commands:
            tools.add("run_command")
        return frozenset(tools)

    @property
    def modified_files(self) -> tuple[str, ...]:
        return tuple(sorted(self._modified))

    # --- paths ----------------------------------------------------------------------------------------------

    def resolve_path(self, raw: Any, *, must_exist: bool = True) -> Path:
        if not isinstance(raw, str) or not raw.strip():
            raise AgentError("path must be a non-empty string")
        pure = PurePosixPath(raw)
        if pure.is_absolute() or raw.startswith("\\") or ".." in pure.parts or "\0" in raw:
            raise AgentError("path must be relative and stay in the workspace")
        parts = [p for p in pure.parts if p not in ("", ".")]
        if any(is_protected(p) for p in parts):
            raise AgentError("path is not accessible")
        root = self.policy.root
        cur = root
        for p in parts:
            cur = cur / p
            if cur.is_symlink():
                raise AgentError("symlinks are not accessible")
        try:
            resolved = cur.resolve(strict=must_exist)
        except (OSError, RuntimeError):
            raise AgentError("path is not accessible") from None
        if resolved != root and root not in resolved.parents:
            raise AgentError("path is not accessible")
        return resolved

    def _rel(self, p: Path) -> str:
        rel = p.relative_to(self.policy.root).as_posix()
        return rel

    # --- read-only tools ------------------------------------------------------------------------------------

    def list_files(self, raw: str = ".") -> str:
        d = self.resolve_path(raw)
        if not d.is_dir():
            raise AgentError("path is not a directory")
        lines = []
        try:
            for entry in sorted(d.iterdir(), key=lambda e: e.name):
                if entry.is_symlink() or is_protected(entry.name):
                    continue
                if entry.is_file():
                    lines.append(f"file {self._rel(entry)}")
                elif entry.is_dir():
                    lines.append(f"dir {self._rel(entry)}")
                else:
                    continue
                if len(lines) >= self.policy.max_list_entries:
                    break
        except OSError as e:
            raise AgentError(f"could not list path: {e}") from None
        return "\n".join(lines) if lines else "(empty directory)"

    def _read_bytes(self, p: Path) -> bytes:
        limit = self.policy.max_file_bytes
        try:
            if p.stat().st_size > limit:
                raise AgentError(f"file exceeds {limit} bytes")
            data = p.read_bytes()
        except OSError as e:
            raise AgentError(f"could not read file: {e}") from None
        if len(data) > limit:
            raise AgentError(f"file exceeds {limit} bytes")
        return data

    def read_file(self, raw: str) -> str:
        p = self.resolve_path(raw)
        if not p.is_file():
            raise AgentError("path is not a regular file")
        data = self._read_bytes(p)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise AgentError("file is not valid UTF-8") from None
        self._observed[self._rel(p)] = hashlib.sha256(data).hexdigest()
        return text

    # --- effects --------------------------------------------------------------------------------------------

    def _check_observed(self, p: Path) -> None:
        if not p.is_file():
            raise AgentError("path is not a regular file")
        rel = self._rel(p)
        if rel not in self._observed:
            raise AgentError("read the existing file before changing it")
        data = self._read_bytes(p)
        if hashlib.sha256(data).hexdigest() != self._observed[rel]:
            raise AgentError("file changed since it was read")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise AgentError("file is not valid UTF-8") from None

    def _prepare_write(self, raw: str, content: str) -> tuple[Path, bytes]:
        if not self.policy.allow_writes:
            raise AgentError("writes are not enabled")
        p = self.resolve_path(raw, must_exist=False)
        if p.exists() or p.is_symlink():
            self._check_observed(p)
        elif not p.parent.is_dir():
            raise AgentError("parent directory does not exist")
        data = content.encode("utf-8")
        if len(data) > self.policy.max_write_bytes:
            raise AgentError(f"write exceeds {self.policy.max_write_bytes} bytes")
        return p, data

    def _prepare_edit(self, raw: str, old: str, new: str) -> tuple[Path, bytes]:
        if not self.policy.allow_writes:
            raise AgentError("writes are not enabled")
        p = self.resolve_path(raw)
        self._check_observed(p)
        text = p.read_bytes().decode("utf-8")
        if not old or text.count(old) != 1:
            raise AgentError("old text must occur exactly once")
        data = text.replace(old, new, 1).encode("utf-8")
        if len(data) > self.policy.max_write_bytes:
            raise AgentError(f"write exceeds {self.policy.max_write_bytes} bytes")
        return p, data

    def _commit(self, p: Path, data: bytes) -> None:
        tmp: Path | None = None
        try:
            with tempfile.NamedTemporaryFile(dir=p.parent, delete=False, prefix=f".{p.name}.", suffix=".tmp") as f:
                tmp = Path(f.name)
                f.write(data)
            os.replace(tmp, p)
            tmp = None
        except OSError as e:
            raise AgentError(f"could not replace file: {e}") from None
        finally:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
        rel = self._rel(p)
        self._observed[rel] = hashlib.sha256(data).hexdigest()
        self._modified.add(rel)

    def write_file(self, raw: str, content: str) -> str:
        p, data = self._prepare_write(raw, content)
        self._commit(p, data)
        return f"wrote {self._rel(p)}"

    def edit_file(self, raw: str, old: str, new: str) -> str:
        p, data = self._prepare_edit(raw, old, new)
        self._commit(p, data)
        return f"edited {self._rel(p)}"

    def _check_command(self, argv: Any) -> tuple[str, ...]:
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a and "\0" not in a for a in argv):
            raise AgentError("argv must contain non-empty strings without NUL")
        if tuple(argv) not in self.policy.allowed_commands:
            raise AgentError("command is not allowed")
        return tuple(argv)

    def run_command(self, argv: list[str]) -> str:
        self._check_command(argv)
        try:
            done = subprocess.run(
                argv,
                cwd=self.policy.root,
                capture_output=True,
                text=True,
                timeout=self.policy.command_timeout_seconds,
                check=False,
            )
            status, output = str(done.returncode), (done.stdout or "") + (done.stderr or "")
        except subprocess.TimeoutExpired as e:
            status = "timeout"
            output = "".join(
                x.decode("utf-8", "replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr)
            )
        except OSError as e:
            raise AgentError(f"could not run command: {e}") from None
        return f"status: {status}\noutput:\n{output[:MAX_COMMAND_OUTPUT]}"

    # --- the gate -------------------------------------------------------------------------------------------

    def _auto_id(self) -> str:
        while f"call-{self._next_call}" in self.receipt_store:
            self._next_call += 1
        call_id = f"call-{self._next_call}"
        self._next_call += 1
        return call_id

    def execute(self, action: ToolAction, tool_call_id: str | None = None) -> str:
        try:
            return self._execute(action, tool_call_id)
        except (AgentError, KeyError, TypeError) as e:
            return f"error: {e}"

    def _execute(self, action: ToolAction, tool_call_id: str | None) -> str:
        tool, args = action.tool, action.arguments
        if tool == "list_files":
            return self.list_files(args.get("path", "."))
        if tool == "read_file":
            return self.read_file(args["path"])
        if tool not in self.available_tools:
            raise AgentError(f"tool is not enabled: {tool}")
        call_id = tool_call_id or self._auto_id()
        existing = self.receipt_store.get(call_id)
        if existing is not None:
            if existing.tool == tool and existing.arguments == args:
                return existing.result
            raise AgentError("tool call id was already used for another action")
        preflight: dict[str, Callable[[], Any]] = {
            "write_file": lambda: self._prepare_write(args["path"], args["content"]),
            "edit_file": lambda: self._prepare_edit(args["path"], args["old"], args["new"]),
            "run_command": lambda: self._check_command(args["argv"]),
        }
        preflight[tool]()
        decision = self.confirm_tool(action) if self.confirm_tool is not None else False
        if isinstance(decision, ApprovalDecision) and not decision.approved:
            raise AgentError(f"operator denied the tool action: {decision.reason}")
        if not (decision is True or (isinstance(decision, ApprovalDecision) and decision.approved)):
            raise AgentError("operator denied the tool action")
        artifacts: tuple[str, ...] = ()
        if tool == "write_file":
            result = self.write_file(args["path"], args["content"])
        elif tool == "edit_file":
            result = self.edit_file(args["path"], args["old"], args["new"])
        else:
            result = self.run_command(args["argv"])
        if tool != "run_command":
            artifacts = (self._normalized(args["path"]),)
        exit_state = "error" if tool == "run_command" and not result.startswith("status: 0\n") else "ok"
        self.receipt_store.put(EffectReceipt(call_id, tool, args, exit_state, result, artifacts))
        return result

    def _normalized(self, raw: str) -> str:
        return self._rel(self.resolve_path(raw))
