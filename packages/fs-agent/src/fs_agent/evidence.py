"""Bounded tool evidence - large results go to content-addressed artifacts, the model sees a preview and
asks for byte ranges through a virtual path."""

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fs_weights.atomic import atomic_output

from .protocol import AgentError, ToolAction

ID_RE = re.compile(r"artifact-[0-9a-f]{64}")
HEX_RE = re.compile(r"[0-9a-f]{64}")
RANGE_RE = re.compile(r"\.tool-artifacts/(artifact-[0-9a-f]{64})/bytes/([0-9]{1,18})-([0-9]{1,18})")
VIRTUAL = ".tool-artifacts/"


@dataclass(frozen=True)
class ArtifactRef:
    artifact_id: str
    byte_count: int
    sha256: str

    def __post_init__(self) -> None:
        if not isinstance(self.artifact_id, str) or not ID_RE.fullmatch(self.artifact_id):
            raise ValueError("artifact id is invalid")
        if type(self.byte_count) is not int or self.byte_count < 0:
            raise ValueError("artifact byte count must be a non-negative integer")
        if not isinstance(self.sha256, str) or not HEX_RE.fullmatch(self.sha256):
            raise ValueError("artifact digest is invalid")
        if self.artifact_id != f"artifact-{self.sha256}":
            raise ValueError("artifact id must match its digest")


@dataclass
class ArtifactStore:
    root: Path
    _refs: dict[str, ArtifactRef] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        root = Path(self.root)
        if root.is_symlink():
            raise ValueError("artifact root must not be a symlink")
        if not root.exists():
            raise ValueError("artifact root must exist")
        if not root.is_dir():
            raise ValueError("artifact root must be a directory")
        self.root = root.resolve()

    def put(self, result: str) -> ArtifactRef:
        if not isinstance(result, str):
            raise ValueError("artifact result must be a string")
        data = result.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        ref = ArtifactRef(f"artifact-{digest}", len(data), digest)
        path = self.root / ref.artifact_id
        try:
            if path.exists():
                if path.read_bytes() != data:
                    raise AgentError("artifact contents conflict with their identity")
            else:
                with atomic_output(path, mode=0o600, error=AgentError) as f:
                    f.write(data)
        except OSError:
            raise AgentError("could not store tool-result artifact") from None
        self._refs[ref.artifact_id] = ref
        return ref

    def read_range(self, artifact_id: str, start: int, end: int) -> bytes:
        if not isinstance(artifact_id, str) or not ID_RE.fullmatch(artifact_id):
            raise AgentError("artifact id is invalid")
        if type(start) is not int or type(end) is not int:
            raise AgentError("artifact range bounds must be integers")
        if not 0 <= start < end:
            raise AgentError("artifact range must satisfy 0 <= start < end")
        ref = self._refs.get(artifact_id)
        if ref is None:
            raise AgentError("artifact is not available in this store")
        try:
            data = (self.root / artifact_id).read_bytes()
        except OSError:
            raise AgentError("could not read tool-result artifact") from None
        if len(data) != ref.byte_count or hashlib.sha256(data).hexdigest() != ref.sha256:
            raise AgentError("artifact digest does not match its recorded identity")
        if end > len(data):
            raise AgentError("artifact range exceeds the stored byte count")
        return data[start:end]

    @staticmethod
    def range_path(artifact_id: str, start: int, end: int) -> str:
        if not isinstance(artifact_id, str) or not ID_RE.fullmatch(artifact_id):
            raise ValueError("artifact id is invalid")
        if type(start) is not int or type(end) is not int or not 0 <= start < end:
            raise ValueError("artifact range must satisfy 0 <= start < end")
        return f"{VIRTUAL}{artifact_id}/bytes/{start}-{end}"


def _head_end(data: bytes, limit: int) -> int:
    end = min(limit, len(data))
    while end > 0:
        try:
            data[:end].decode("utf-8")
            return end
        except UnicodeDecodeError:
            end -= 1
    return 0


def _tail_start(data: bytes, head_end: int, limit: int) -> int:
    start = max(head_end, len(data) - limit)
    while start < len(data):
        try:
            data[start:].decode("utf-8")
            return start
        except UnicodeDecodeError:
            start += 1
    return len(data)


def _compact(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class BoundedEvidenceWorkspace:
    workspace: Any
    artifacts: ArtifactStore
    max_inline_bytes: int = 512
    preview_bytes: int = 64
    max_range_bytes: int = 512

    def __post_init__(self) -> None:
        if not all(type(v) is int and v > 0 for v in (self.max_inline_bytes, self.preview_bytes, self.max_range_bytes)):
            raise ValueError("evidence limits must be positive integers")
        if self.max_inline_bytes < 512:
            raise ValueError("max_inline_bytes must be at least 512")
        if self.max_range_bytes < 4:
            raise ValueError("max_range_bytes must be at least 4")
        if self.preview_bytes > self.max_inline_bytes:
            raise ValueError("preview_bytes must not exceed max_inline_bytes")

    @property
    def policy(self) -> Any:
        return self.workspace.policy

    @property
    def available_tools(self) -> Any:
        return self.workspace.available_tools

    @property
    def modified_files(self) -> Any:
        return self.workspace.modified_files

    def execute(self, action: ToolAction, tool_call_id: str | None = None) -> str:
        path = action.arguments.get("path") if action.tool == "read_file" else None
        if isinstance(path, str) and path.startswith(VIRTUAL):
            return self._range(path)
        result = self.workspace.execute(action, tool_call_id)
        if result.startswith("error:") or len(result.encode("utf-8")) <= self.max_inline_bytes:
            return result
        try:
            return self._externalize(result)
        except AgentError as e:
            return f"error: {e}"

    def _range(self, path: str) -> str:
        m = RANGE_RE.fullmatch(path)
        if m is None:
            return "error: artifact range path is malformed"
        artifact_id, start, end = m.group(1), int(m.group(2)), int(m.group(3))
        if end - start > self.max_range_bytes:
            return f"error: artifact range exceeds {self.max_range_bytes} bytes"
        try:
            data = self.artifacts.read_range(artifact_id, start, end)
        except AgentError as e:
            return f"error: {e}"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return "error: artifact range does not align to UTF-8 text"
        ref = self.artifacts._refs[artifact_id]
        return "Artifact range:\n" + _compact(
            {
                "artifact_id": artifact_id,
                "byte_count": len(data),
                "data": text,
                "end": end,
                "sha256": ref.sha256,
                "start": start,
                "total_byte_count": ref.byte_count,
            }
        )

    def _externalize(self, result: str) -> str:
        ref = self.artifacts.put(result)
        data = result.encode("utf-8")
        suggested = _head_end(data, self.max_range_bytes)
        for limit in range(self.preview_bytes, -1, -1):
            head = _head_end(data, limit)
            tail = _tail_start(data, head, limit)
            text = "Tool result externalized:\n" + _compact(
                {
                    "artifact_id": ref.artifact_id,
                    "byte_count": ref.byte_count,
                    "head_preview": data[:head].decode("utf-8"),
                    "head_range": [0, head],
                    "omitted_range": [head, tail],
                    "range_request": {
                        "path": ArtifactStore.range_path(ref.artifact_id, 0, suggested),
                        "tool": "read_file",
                    },
                    "sha256": ref.sha256,
                    "tail_preview": data[tail:].decode("utf-8"),
                    "tail_range": [tail, ref.byte_count],
                }
            )
            if len(text.encode("utf-8")) <= self.max_inline_bytes:
                return text
        raise AgentError("evidence observation limit is too small for artifact metadata")
