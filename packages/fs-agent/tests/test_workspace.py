"""Days 2-3: confinement, approvals, effects and the receipt log's byte format."""

import json
import os
import sys

import pytest

from fs_agent import AgentError, ApprovalDecision, EffectReceipt, ReceiptStore, ToolAction, ToolPolicy, Workspace
from fs_agent.confined import ConfinedRoot


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "ws"
    (r / "src").mkdir(parents=True)
    (r / "app.py").write_text("answer = 1\n")
    (r / "src" / "main.py").write_text("print('hi')\n")
    (r / ".env").write_text("SECRET=1\n")
    (r / "key.pem").write_text("x")
    (tmp_path / "outside.txt").write_text("outside\n")
    return r


def ws(root, **kw):
    approve = kw.pop("approve", True)
    return Workspace(ToolPolicy(root, **kw), confirm_tool=(lambda a: approve) if approve is not None else None)


def test_policy_validation(tmp_path, root):
    with pytest.raises(ValueError, match="workspace root must exist"):
        ToolPolicy(tmp_path / "nope")
    (tmp_path / "link").symlink_to(root)
    with pytest.raises(ValueError, match="must not be a symlink"):
        ToolPolicy(tmp_path / "link")
    with pytest.raises(ValueError, match="must be a directory"):
        ToolPolicy(root / "app.py")
    with pytest.raises(ValueError, match="workspace limits must be positive integers"):
        ToolPolicy(root, max_file_bytes=True)
    with pytest.raises(ValueError, match="allow_writes must be a boolean"):
        ToolPolicy(root, allow_writes=1)
    with pytest.raises(ValueError, match="command timeout must be finite and positive"):
        ToolPolicy(root, command_timeout_seconds=float("inf"))
    with pytest.raises(ValueError, match="allowed commands must be a tuple of tuples"):
        ToolPolicy(root, allowed_commands=[("ls",)])
    with pytest.raises(ValueError, match="without NUL"):
        ToolPolicy(root, allowed_commands=(("ls\0",),))


def test_listing_and_reading(root):
    w = ws(root)
    assert w.available_tools == {"list_files", "read_file"}
    assert w.list_files() == "file app.py\ndir src"  # .env and key.pem are invisible
    assert w.list_files("src") == "file src/main.py"
    assert w.read_file("./app.py") == "answer = 1\n"
    (root / "empty").mkdir()
    assert w.list_files("empty") == "(empty directory)"


@pytest.mark.parametrize(
    "path,words",
    [
        ("../outside.txt", "path must be relative and stay in the workspace"),
        ("/etc/passwd", "path must be relative and stay in the workspace"),
        (".env", "path is not accessible"),
        ("key.pem", "path is not accessible"),
        (".git/config", "path is not accessible"),
        ("src/.ENV.local", "path is not accessible"),
        ("", "path must be a non-empty string"),
    ],
)
def test_traversal_and_protected_names(root, path, words):
    assert ws(root).execute(ToolAction("read_file", {"path": path})) == f"error: {words}"


def test_symlinks_inside_are_refused(root, tmp_path):
    (root / "link.txt").symlink_to(tmp_path / "outside.txt")
    (root / "dirlink").symlink_to(tmp_path)
    w = ws(root)
    assert w.execute(ToolAction("read_file", {"path": "link.txt"})) == "error: symlinks are not accessible"
    assert w.execute(ToolAction("read_file", {"path": "dirlink/outside.txt"})) == "error: symlinks are not accessible"
    assert "link" not in w.list_files()


def test_edit_requires_read_and_detects_changes(root):
    w = ws(root, allow_writes=True)
    edit = ToolAction("edit_file", {"path": "app.py", "old": "1", "new": "2"})
    assert w.execute(edit) == "error: read the existing file before changing it"
    w.read_file("app.py")
    (root / "app.py").write_text("answer = 1  # changed\n")
    assert w.execute(edit) == "error: file changed since it was read"
    w.read_file("app.py")
    assert (
        w.execute(ToolAction("edit_file", {"path": "app.py", "old": "x", "new": "y"}))
        == "error: old text must occur exactly once"
    )
    assert w.execute(edit) == "edited app.py"
    assert (root / "app.py").read_text() == "answer = 2  # changed\n" and w.modified_files == ("app.py",)
    assert (
        w.execute(ToolAction("write_file", {"path": "new/x.py", "content": "x"}))
        == "error: parent directory does not exist"
    )
    big = ToolAction("write_file", {"path": "big.txt", "content": "x" * 70000})
    assert w.execute(big) == "error: write exceeds 65536 bytes"


def test_change_during_approval_is_caught(root):
    w = Workspace(ToolPolicy(root, allow_writes=True))
    w.read_file("app.py")

    def approve(action):
        (root / "app.py").write_text("answer = 99\n")
        return True

    w.confirm_tool = approve
    r = w.execute(ToolAction("edit_file", {"path": "app.py", "old": "1", "new": "2"}))
    assert r == "error: file changed since it was read" and (root / "app.py").read_text() == "answer = 99\n"
    assert w.receipt_store.get("call-1") is None


def test_denials_and_approval_decisions(root):
    w = ws(root, allow_writes=True, approve=None)
    w.read_file("app.py")
    edit = ToolAction("edit_file", {"path": "app.py", "old": "1", "new": "2"})
    assert w.execute(edit) == "error: operator denied the tool action"
    w.confirm_tool = lambda a: ApprovalDecision(False, "keep the requested answer at 2")
    assert w.execute(edit) == "error: operator denied the tool action: keep the requested answer at 2"
    w.confirm_tool = lambda a: "yes"
    assert w.execute(edit) == "error: operator denied the tool action"
    assert (root / "app.py").read_text() == "answer = 1\n" and w.receipt_store.all() == []
    with pytest.raises(ValueError, match="nonblank operator reason"):
        ApprovalDecision(False, " ")
    with pytest.raises(ValueError, match="approved must be a boolean"):
        ApprovalDecision(1)
    disabled = ws(root)
    assert (
        disabled.execute(ToolAction("write_file", {"path": "a", "content": "b"}))
        == "error: tool is not enabled: write_file"
    )


def test_commands_allowlist_and_receipts(root):
    script = "import os,sys; print(os.getcwd(), flush=True); sys.stderr.write('fail\\n'); sys.exit(3)"
    py = sys.executable
    w = ws(root, allowed_commands=((py, "-c", script), (py, "-c", "import time; time.sleep(30)")))
    w.policy = ToolPolicy(root, allowed_commands=w.policy.allowed_commands, command_timeout_seconds=1)
    assert w.execute(ToolAction("run_command", {"argv": [py, "-c", "print(2)"]})) == "error: command is not allowed"
    r = w.execute(ToolAction("run_command", {"argv": [py, "-c", script]}))
    assert r == f"status: 3\noutput:\n{root.resolve()}\nfail\n"  # cwd is the root; stderr interleaved
    rec = w.receipt_store.get("call-2")  # call-1 was consumed by the refused attempt
    assert rec.exit_state == "error" and rec.changed_artifacts == ()
    r = w.execute(ToolAction("run_command", {"argv": [py, "-c", "import time; time.sleep(30)"]}))
    assert r == "status: timeout\noutput:\n" and w.receipt_store.get("call-3").exit_state == "error"


def test_idempotent_call_ids_and_receipt_log_format(root):
    log = root / "receipts.jsonl"
    w = Workspace(ToolPolicy(root, allow_writes=True), confirm_tool=lambda a: True, receipt_store=ReceiptStore(log))
    w.read_file("app.py")
    edit = ToolAction("edit_file", {"path": "./app.py", "old": "1", "new": "2"})
    assert w.execute(edit, "call-7") == "edited app.py"
    assert w.execute(edit, "call-7") == "edited app.py"  # retry: stored result, no second effect
    assert (
        w.execute(ToolAction("write_file", {"path": "z", "content": "q"}), "call-7")
        == "error: tool call id was already used for another action"
    )
    line = log.read_text()
    assert line.count("\n") == 1 and '"tool": "edit_file"' in line
    d = json.loads(line)
    assert list(d) == sorted(d) and d["arguments"] == {"path": "./app.py", "old": "1", "new": "2"}
    assert d["changed_artifacts"] == ["app.py"] and d["exit_state"] == "ok"
    r = EffectReceipt.from_dict(d)
    assert line == json.dumps(r.to_dict(), sort_keys=True) + "\n"
    reopened = Workspace(ToolPolicy(root, allow_writes=True), lambda a: True, ReceiptStore(log))
    reopened.read_file("app.py")
    assert reopened.execute(ToolAction("edit_file", {"path": "app.py", "old": "2", "new": "3"})) == "edited app.py"
    assert reopened.receipt_store.get("call-1") is not None


def test_tampered_receipt_log_is_refused(root):
    log = root / "r.jsonl"
    store = ReceiptStore(log)
    store.put(EffectReceipt("call-1", "edit_file", {"path": "a"}, "ok", "edited a", ("a",)))
    log.write_text(log.read_text().replace('"tool": "edit_file"', '"tool": "write_file"'))
    with pytest.raises(AgentError, match="receipt digest does not match its contents"):
        ReceiptStore(log)
    log.write_text('{"x": 1}\n')
    with pytest.raises(AgentError, match="receipt is malformed"):
        ReceiptStore(log)


def test_oversized_files_and_a_failed_rename_is_finished_on_restart(root, monkeypatch):
    (root / "big.txt").write_text("x" * 70000)
    log = root / "receipts.jsonl"
    w = Workspace(ToolPolicy(root, allow_writes=True), lambda a: True, ReceiptStore(log))
    assert w.execute(ToolAction("read_file", {"path": "big.txt"})) == "error: file exceeds 65536 bytes"
    w.read_file("app.py")

    def broken(self, key, parts):
        raise OSError("disk full")

    monkeypatch.setattr(ConfinedRoot, "publish", broken)
    r = w.execute(ToolAction("write_file", {"path": "app.py", "content": "new"}))
    assert r == "error: could not replace file: disk full; it is retried on the next start"
    assert (root / "app.py").read_text() == "answer = 1\n"  # not yet visible, but the receipt promises it
    assert sorted(os.listdir(root)) == [
        ".env",
        ".fs-agent",
        "app.py",
        "big.txt",
        "key.pem",
        "receipts.jsonl",
        "receipts.jsonl.head",
        "src",
    ]  # no temp file in the visible tree
    monkeypatch.undo()
    Workspace(ToolPolicy(root, allow_writes=True), lambda a: True, ReceiptStore(log))  # recovery on start
    assert (root / "app.py").read_text() == "new" and os.listdir(root / ".fs-agent" / "staged") == []
