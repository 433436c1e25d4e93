"""Day 9: large tool results become artifacts; the model reads bounded byte ranges of them."""

import json

import pytest

from fs_agent import AgentError, ArtifactRef, ArtifactStore, BoundedEvidenceWorkspace, ToolAction, ToolPolicy, Workspace


@pytest.fixture
def bounded(tmp_path):
    root, arts = tmp_path / "ws", tmp_path / "arts"
    root.mkdir()
    arts.mkdir()
    return root, BoundedEvidenceWorkspace(
        Workspace(ToolPolicy(root)), ArtifactStore(arts), preview_bytes=8, max_range_bytes=24
    )


def read(b, path):
    return b.execute(ToolAction("read_file", {"path": path}))


def test_inline_boundary_and_externalized_observation(bounded):
    root, b = bounded
    (root / "small.txt").write_text("x" * 512)
    (root / "big.txt").write_text("x" * 513)
    assert read(b, "small.txt") == "x" * 512
    content = "HEAD----" + "x" * 3000 + "----TAIL"
    (root / "log.txt").write_text(content)
    obs = read(b, "log.txt")
    assert obs.startswith("Tool result externalized:\n") and len(obs.encode()) <= 512
    body = json.loads(obs.split("\n", 1)[1])
    n = len(content)
    assert body["head_preview"] == "HEAD----" and body["head_range"] == [0, 8]
    assert (
        body["tail_preview"] == "----TAIL" and body["tail_range"] == [n - 8, n] and body["omitted_range"] == [8, n - 8]
    )
    assert body["range_request"] == {"path": f".tool-artifacts/{body['artifact_id']}/bytes/0-24", "tool": "read_file"}
    reply = read(b, body["range_request"]["path"])
    assert reply.startswith("Artifact range:\n")
    data = json.loads(reply.split("\n", 1)[1])
    assert data["data"] == content[:24] and data["total_byte_count"] == n and data["byte_count"] == 24
    assert read(b, "big.txt").startswith("Tool result externalized:\n")


def test_range_errors(bounded):
    root, b = bounded
    (root / "u.txt").write_text("é" * 600)
    body = json.loads(read(b, "u.txt").split("\n", 1)[1])
    aid = body["artifact_id"]
    assert body["range_request"]["path"].endswith("/bytes/0-24")
    assert read(b, f".tool-artifacts/{aid}/bytes/1-3") == "error: artifact range does not align to UTF-8 text"
    assert read(b, f".tool-artifacts/{aid}/bytes/0-100") == "error: artifact range exceeds 24 bytes"
    assert read(b, f".tool-artifacts/{aid}/bytes/5-2") == "error: artifact range must satisfy 0 <= start < end"
    assert read(b, f".tool-artifacts/{aid}/bytes/1190-1210") == "error: artifact range exceeds the stored byte count"
    for bad in (
        f".tool-artifacts/{aid}/bytes/-1-3",
        ".tool-artifacts/artifact-xyz/bytes/0-3",
        f".tool-artifacts/{aid}/bytes/0-3/x",
        f".tool-artifacts/{aid}/bytes/{'9' * 5000}-1",
        f".tool-artifacts/{aid}/bytes/0-{'9' * 5000}",
    ):
        assert read(b, bad) == "error: artifact range path is malformed"
    other = "artifact-" + "0" * 64
    assert read(b, f".tool-artifacts/{other}/bytes/0-3") == "error: artifact is not available in this store"


def test_store_identity_and_tampering(tmp_path):
    store = ArtifactStore(tmp_path)
    ref = store.put("hello")
    assert store.put("hello") == ref and ref.artifact_id == f"artifact-{ref.sha256}"
    (tmp_path / ref.artifact_id).write_text("jello")
    with pytest.raises(AgentError, match="artifact digest does not match its recorded identity"):
        store.read_range(ref.artifact_id, 0, 2)
    with pytest.raises(AgentError, match="artifact contents conflict with their identity"):
        store.put("hello")
    with pytest.raises(ValueError, match="artifact id must match its digest"):
        ArtifactRef("artifact-" + "a" * 64, 1, "b" * 64)
    with pytest.raises(ValueError, match="max_inline_bytes must be at least 512"):
        BoundedEvidenceWorkspace(Workspace(ToolPolicy(tmp_path)), store, max_inline_bytes=100)
