"""A confined workspace whose effects need approval and leave receipts.

Reads and writes go through ``ConfinedRoot`` (confined.py: descriptor-relative, no symlink followed, no hard link
accepted); commands through commands.py (explicit environment, own process group). An effect is staged, its receipt
appended, and only then made visible by a rename; a crash in between is rolled forward on the next start (the
staged bytes and the receipt both exist) or rolled back (no receipt: the staged file is deleted). So after any
crash a changed file has a receipt and a receipt's file is changed, and no temporary file is ever in the visible
tree (docs/security.md).
"""

import contextlib
import hashlib
import math
import os
import stat
import subprocess  # noqa: F401 - the seam agent tests replace (workspace.subprocess.run): commands.py calls it
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from fs_weights.atomic import current_umask

from . import commands
from .commands import command_env
from .confined import STATE_DIR, ConfinedRoot
from .protocol import AgentError, ToolAction, check_text
from .receipts import EffectReceipt, ReceiptStore, anchor_path

PROTECTED = {".aws", ".env", ".git", ".ssh", "credentials", "id_ed25519", "id_rsa", STATE_DIR}
MAX_COMMAND_OUTPUT = 16_000


def _int(x: Any) -> bool:
    return type(x) is int


def tools_for(allow_writes: bool, run_commands: bool) -> frozenset[str]:
    """The tools a policy offers: reading always, writing with ``allow_writes``, commands when any is allowed."""
    tools = {"list_files", "read_file"}
    if allow_writes:
        tools |= {"write_file", "edit_file"}
    if run_commands:
        tools.add("run_command")
    return frozenset(tools)


@dataclass(frozen=True)
class ToolPolicy:
    root: Path
    max_file_bytes: int = 65536
    max_list_entries: int = 200
    allow_writes: bool = False
    allowed_commands: tuple[tuple[str, ...], ...] = ()
    max_write_bytes: int = 65536
    command_timeout_seconds: float = 30.0
    pass_env: tuple[str, ...] = ()  # environment variables commands may see beyond PATH, HOME, LANG

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
        if not isinstance(self.pass_env, tuple) or not all(
            isinstance(n, str) and n and "=" not in n and "\0" not in n for n in self.pass_env
        ):
            raise ValueError("pass_env must be a tuple of environment variable names")
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


def staged_key(call_id: str) -> str:
    """The staged file of a tool call: a fixed-length name whatever the call id holds."""
    return hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass
class Workspace:
    policy: ToolPolicy
    confirm_tool: Callable[[ToolAction], Any] | None = None
    receipt_store: ReceiptStore = field(default_factory=ReceiptStore)
    _observed: dict[str, str] = field(default_factory=dict, repr=False)
    _modified: set[str] = field(default_factory=set, repr=False)
    _next_call: int = field(default=1, repr=False)

    def __post_init__(self) -> None:
        self.fs = ConfinedRoot(self.policy.root)
        self._log_parts: set[tuple[str, ...]] = set()
        log = self.receipt_store.path
        if log is not None:  # the log and its anchor are never tool-visible, wherever they are in the tree
            for p in (Path(log), anchor_path(Path(log))):
                with contextlib.suppress(ValueError):  # a log outside the root needs no hiding
                    self._log_parts.add(Path(os.path.realpath(p)).relative_to(self.policy.root).parts)
        self.recover()

    def recover(self) -> list[str]:
        """Finish or undo the effects a crash interrupted: a staged file whose call has a receipt is renamed into
        place (the receipt promised it); one without is deleted. Returns what was rolled forward."""
        by_key = {staged_key(r.tool_call_id): r for r in self.receipt_store.all() if r.changed_artifacts}
        done = []
        for key in self.fs.staged():
            r = by_key.get(key)
            if r is not None and r.exit_state == "ok":
                self.fs.publish(key, self.parts(r.changed_artifacts[0]))
                done.append(r.changed_artifacts[0])
            else:
                self.fs.discard(key)
        return done

    @property
    def available_tools(self) -> frozenset[str]:
        return tools_for(self.policy.allow_writes, bool(self.policy.allowed_commands))

    @property
    def modified_files(self) -> tuple[str, ...]:
        return tuple(sorted(self._modified))

    # --- paths ----------------------------------------------------------------------------------------------

    def parts(self, raw: Any) -> tuple[str, ...]:
        """The validated components of a workspace-relative path (``()`` is the root itself)."""
        if not isinstance(raw, str) or not raw.strip():
            raise AgentError("path must be a non-empty string")
        check_text(raw, "path")
        pure = PurePosixPath(raw)
        if pure.is_absolute() or raw.startswith("\\") or ".." in pure.parts or "\0" in raw:
            raise AgentError("path must be relative and stay in the workspace")
        parts = tuple(p for p in pure.parts if p not in ("", "."))
        if any(is_protected(p) for p in parts) or parts in self._log_parts:
            raise AgentError("path is not accessible")
        return parts

    def resolve_path(self, raw: Any, *, must_exist: bool = True) -> Path:
        """The absolute path ``raw`` names, checked component by component through the root's descriptor (any
        symlink refused). For naming a file only: every read and write goes through ``fs`` again, by descriptor,
        so what this returned cannot be swapped before it is used."""
        parts = self.parts(raw)
        for i in range(1, len(parts) + 1):
            st = self.fs.lstat(parts[:i])
            if st is None:
                if must_exist or i < len(parts):
                    raise AgentError("path is not accessible")
                break
            if stat.S_ISLNK(st.st_mode):
                raise AgentError("symlinks are not accessible")
        return self.policy.root.joinpath(*parts)

    def file_bytes(self, raw: str) -> bytes:
        """A file's bytes, confined as every read is (evaluation reads evidence through this)."""
        return self.fs.read(self._file_parts(raw), self.policy.max_file_bytes)[0]

    def _file_parts(self, raw: Any) -> tuple[str, ...]:
        parts = self.parts(raw)
        if not parts:
            raise AgentError("path is not a regular file")
        return parts

    # --- read-only tools ------------------------------------------------------------------------------------

    def entries(self, raw: str = ".") -> list[tuple[str, str]]:
        """(kind, path) of what ``list_files`` shows in ``raw``: "file" or "dir", protected names and the receipt
        log left out, at most ``max_list_entries``."""
        parts = self.parts(raw)
        shown = [(k, "/".join((*parts, n))) for n, k in self.fs.entries(parts)
                 if not is_protected(n) and (*parts, n) not in self._log_parts]  # fmt: skip
        return shown[: self.policy.max_list_entries]

    def list_files(self, raw: str = ".") -> str:
        lines = [f"{kind} {path}" for kind, path in self.entries(raw)]
        return "\n".join(lines) if lines else "(empty directory)"

    def read_file(self, raw: str) -> str:
        parts = self._file_parts(raw)
        data, _ = self.fs.read(parts, self.policy.max_file_bytes)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise AgentError("file is not valid UTF-8") from None
        self._observed["/".join(parts)] = hashlib.sha256(data).hexdigest()
        return text

    # --- effects --------------------------------------------------------------------------------------------

    def _current(self, parts: tuple[str, ...]) -> tuple[bytes, int]:
        """The existing file's bytes and mode, refused unless read first and unchanged since."""
        rel = "/".join(parts)
        data, st = self.fs.read(parts, self.policy.max_file_bytes)  # refuses links and non-files first
        if rel not in self._observed:
            raise AgentError("read the existing file before changing it")
        if hashlib.sha256(data).hexdigest() != self._observed[rel]:
            raise AgentError("file changed since it was read")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise AgentError("file is not valid UTF-8") from None
        return data, stat.S_IMODE(st.st_mode)

    def _prepare_write(self, raw: str, content: str) -> tuple[tuple[str, ...], bytes, int]:
        if not self.policy.allow_writes:
            raise AgentError("writes are not enabled")
        parts = self._file_parts(raw)
        if self.fs.lstat(parts) is not None:
            _, mode = self._current(parts)
        else:
            parent = self.fs.lstat(parts[:-1])
            if parent is None or not stat.S_ISDIR(parent.st_mode):
                raise AgentError("parent directory does not exist")
            mode = 0o666 & ~current_umask()
        check_text(content, "content")
        data = content.encode("utf-8")
        if len(data) > self.policy.max_write_bytes:
            raise AgentError(f"write exceeds {self.policy.max_write_bytes} bytes")
        return parts, data, mode

    def _prepare_edit(self, raw: str, old: str, new: str) -> tuple[tuple[str, ...], bytes, int]:
        if not self.policy.allow_writes:
            raise AgentError("writes are not enabled")
        parts = self._file_parts(raw)
        data, mode = self._current(parts)
        check_text(old, "old")
        check_text(new, "new")
        text = data.decode("utf-8")
        if not old or text.count(old) != 1:
            raise AgentError("old text must occur exactly once")
        out = text.replace(old, new, 1).encode("utf-8")
        if len(out) > self.policy.max_write_bytes:
            raise AgentError(f"write exceeds {self.policy.max_write_bytes} bytes")
        return parts, out, mode

    def _commit(self, call_id: str, parts: tuple[str, ...], data: bytes, mode: int, receipt: EffectReceipt) -> None:
        """Stage, record, publish - in that order (see the module docstring)."""
        key = staged_key(call_id)
        try:
            self.fs.stage(key, data, mode)
        except OSError as e:
            raise AgentError(f"could not stage file: {e.strerror or e}") from None
        try:
            self.receipt_store.put(receipt)
        except BaseException:
            self.fs.discard(key)
            raise
        try:
            self.fs.publish(key, parts)
        except OSError as e:  # the receipt exists: the next start retries the rename (recover)
            raise AgentError(f"could not replace file: {e.strerror or e}; it is retried on the next start") from None
        rel = "/".join(parts)
        self._observed[rel] = hashlib.sha256(data).hexdigest()
        self._modified.add(rel)

    def write_file(self, raw: str, content: str, call_id: str | None = None) -> str:
        return self._effect("write_file", {"path": raw, "content": content}, call_id)

    def edit_file(self, raw: str, old: str, new: str, call_id: str | None = None) -> str:
        return self._effect("edit_file", {"path": raw, "old": old, "new": new}, call_id)

    def _effect(self, tool: str, args: dict[str, Any], call_id: str | None) -> str:
        if tool == "write_file":
            parts, data, mode = self._prepare_write(args["path"], args["content"])
        else:
            parts, data, mode = self._prepare_edit(args["path"], args["old"], args["new"])
        rel = "/".join(parts)
        result = f"{'wrote' if tool == 'write_file' else 'edited'} {rel}"
        call_id = call_id or self._auto_id()
        self._commit(call_id, parts, data, mode, EffectReceipt(call_id, tool, args, "ok", result, (rel,)))
        return result

    def _check_command(self, argv: Any) -> tuple[str, ...]:
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a and "\0" not in a for a in argv):
            raise AgentError("argv must contain non-empty strings without NUL")
        if tuple(argv) not in self.policy.allowed_commands:
            raise AgentError("command is not allowed")
        return tuple(argv)

    def run_command(self, argv: list[str]) -> str:
        self._check_command(argv)
        env = command_env(self.policy.root, self.policy.pass_env)
        status, output = commands.run_confined(argv, self.policy.root, self.policy.command_timeout_seconds, env)
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
        except (AgentError, KeyError, TypeError, UnicodeError) as e:
            return f"error: {e}"

    def _execute(self, action: ToolAction, tool_call_id: str | None) -> str:
        tool, args = action.tool, action.arguments
        check_text(args, "arguments")
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
        if tool in ("write_file", "edit_file"):
            return self._effect(tool, args, call_id)  # re-prepared: the file may have changed during approval
        result = self.run_command(args["argv"])
        exit_state = "ok" if result.startswith("status: 0\n") else "error"
        self.receipt_store.put(EffectReceipt(call_id, tool, args, exit_state, result, ()))
        return result
