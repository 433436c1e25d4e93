"""What the agent promises under attack and under crashes (docs/security.md): no escape from the workspace, no
data loss, receipts that cannot be silently edited, commands that see only what they are given and leave nothing
running, and one clean error for every bad file or flag."""

import io
import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from fs_agent import AgentError, EffectReceipt, ReceiptStore, ToolAction, ToolPolicy, Workspace
from fs_agent.cli import main
from fs_agent.protocol import parse_action
from fs_agent.receipts import anchor_path

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "ws"
    (r / "sub").mkdir(parents=True)
    (r / "sub" / "inside.txt").write_text("inside\n")
    (r / "app.py").write_text("answer = 1\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "inside.txt").write_text("OUTSIDE SECRET\n")
    return r


def workspace(root, log=None, **kw):
    return Workspace(ToolPolicy(root, allow_writes=True, **kw), lambda a: True, ReceiptStore(log))


# --- escapes ------------------------------------------------------------------------------------------------------


def test_swapping_a_directory_for_a_symlink_never_escapes(root, tmp_path):
    """A thread swaps ``sub`` for a symlink to ``outside`` and back (atomic renames) while the workspace reads and
    writes through ``sub`` for a few seconds: every operation either sees the real ``sub`` or is refused."""
    w = workspace(root)
    outside = tmp_path / "outside"
    link = root / "sub.link"
    stop = threading.Event()

    def swapper():
        while not stop.is_set():
            link.symlink_to(outside, target_is_directory=True)
            os.rename(root / "sub", root / "sub.real")
            os.rename(link, root / "sub")
            os.rename(root / "sub", link)
            os.rename(root / "sub.real", root / "sub")
            link.unlink()

    t = threading.Thread(target=swapper)
    t.start()
    reads = refused = writes = 0
    deadline = time.monotonic() + 3
    try:
        while time.monotonic() < deadline:
            r = w.execute(ToolAction("read_file", {"path": "sub/inside.txt"}))
            assert "OUTSIDE" not in r
            reads += r == "inside\n"
            refused += r.startswith("error: ")
            n = writes
            r = w.execute(ToolAction("write_file", {"path": f"sub/new{n}.txt", "content": "x"}))
            writes += r.startswith("wrote")
    finally:
        stop.set()
        t.join()
    assert sorted(os.listdir(outside)) == ["inside.txt"]  # nothing created outside the root
    assert (outside / "inside.txt").read_text() == "OUTSIDE SECRET\n"
    assert reads > 0 and writes > 0  # the loop really ran through both states


def test_hard_links_are_refused_for_reads_and_writes(root, tmp_path):
    os.link(tmp_path / "outside" / "inside.txt", root / "hard.txt")
    w = workspace(root)
    assert w.execute(ToolAction("read_file", {"path": "hard.txt"})) == "error: hard-linked files are not accessible"
    r = w.execute(ToolAction("write_file", {"path": "hard.txt", "content": "x"}))
    assert r == "error: hard-linked files are not accessible"
    assert (tmp_path / "outside" / "inside.txt").read_text() == "OUTSIDE SECRET\n"


def test_fifos_and_devices_are_not_read(root):
    os.mkfifo(root / "pipe")
    assert workspace(root).execute(ToolAction("read_file", {"path": "pipe"})) == "error: path is not a regular file"


def test_the_receipt_log_and_state_dir_are_invisible_to_tools(root):
    log = root / "logs" / "receipts.jsonl"
    log.parent.mkdir()
    w = workspace(root, log)
    w.read_file("app.py")
    w.execute(ToolAction("edit_file", {"path": "app.py", "old": "1", "new": "2"}))
    for path in (
        "logs/receipts.jsonl",
        "logs/receipts.jsonl.head",
        ".fs-agent/staged",
        "./logs/../logs/receipts.jsonl",
    ):
        assert w.execute(ToolAction("read_file", {"path": path})).startswith("error: path ")
        assert w.execute(ToolAction("write_file", {"path": path, "content": "{}"})).startswith("error: path ")
    assert w.list_files("logs") == "(empty directory)" and ".fs-agent" not in w.list_files()


# --- data loss ----------------------------------------------------------------------------------------------------


def test_edits_keep_the_file_mode(root):
    script = root / "run.sh"
    script.write_text("#!/bin/sh\necho 1\n")
    script.chmod(0o751)
    w = workspace(root)
    w.read_file("run.sh")
    assert w.execute(ToolAction("edit_file", {"path": "run.sh", "old": "echo 1", "new": "echo 2"})) == "edited run.sh"
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    w.read_file("run.sh")
    assert w.execute(ToolAction("write_file", {"path": "run.sh", "content": "#!/bin/sh\necho 3\n"})) == "wrote run.sh"
    assert stat.S_IMODE(script.stat().st_mode) == 0o751 and subprocess.run([script]).returncode == 0


EDIT_LOOP = textwrap.dedent(
    """
    import sys
    from fs_agent import ReceiptStore, ToolAction, ToolPolicy, Workspace
    root, log = sys.argv[1], sys.argv[2]
    w = Workspace(ToolPolicy(root, allow_writes=True), lambda a: True, ReceiptStore(log))
    n = len(w.receipt_store.all())
    while True:
        w.read_file("f.txt")
        r = w.execute(ToolAction("write_file", {"path": "f.txt", "content": f"v{n + 1}\\n" * 500}), f"call-{n + 1}")
        assert r == "wrote f.txt", r
        n += 1
        print(n, flush=True)
    """
)


def test_sigkill_at_random_points_never_separates_a_change_from_its_receipt(tmp_path):
    """Kill a writer at random moments, 12 times; after each restart the file is exactly the content its last
    receipt promised (v<receipts>), and no temporary file is left in the visible tree."""
    root, log = tmp_path / "ws", tmp_path / "receipts.jsonl"
    root.mkdir()
    (root / "f.txt").write_text("v0\n" * 500)
    rng = random.Random(0)
    for _ in range(12):
        p = subprocess.Popen([sys.executable, "-c", EDIT_LOOP, str(root), str(log)], stdout=subprocess.PIPE)
        assert p.stdout is not None
        p.stdout.readline()  # it started and wrote at least once
        time.sleep(rng.uniform(0, 0.05))
        p.send_signal(signal.SIGKILL)
        p.wait()
        w = Workspace(ToolPolicy(root, allow_writes=True), lambda a: True, ReceiptStore(log))  # recovery runs here
        n = len(w.receipt_store.all())
        assert (root / "f.txt").read_text() == f"v{n}\n" * 500
        assert sorted(os.listdir(root)) == [".fs-agent", "f.txt"] and os.listdir(root / ".fs-agent" / "staged") == []
    assert n >= 12


# --- receipts -----------------------------------------------------------------------------------------------------


@pytest.fixture
def log(tmp_path):
    store = ReceiptStore(tmp_path / "r.jsonl")
    for i in range(1, 5):
        store.put(EffectReceipt(f"call-{i}", "write_file", {"path": f"f{i}"}, "ok", f"wrote f{i}", (f"f{i}",)))
    return tmp_path / "r.jsonl"


def lines(path):
    return path.read_text().splitlines(keepends=True)


def forge(line, **change):
    d = json.loads(line)
    r = EffectReceipt.from_dict(d)
    fields = {**r.payload(), **change}
    f = EffectReceipt(
        fields["tool_call_id"],
        fields["tool"],
        fields["arguments"],
        fields["exit_state"],
        fields["result"],
        tuple(fields["changed_artifacts"]),
        fields["prev"],
    )
    return json.dumps(f.to_dict(), sort_keys=True) + "\n"  # a consistent line: its own id recomputed


@pytest.mark.parametrize(
    "tamper,words",
    [
        (lambda ls: [ls[0], ls[1].replace("wrote f2", "wrote f9"), *ls[2:]], "digest does not match"),
        (lambda ls: [ls[0], *ls[2:]], "receipt 2 \\(call-3\\) does not follow receipt 1"),
        (lambda ls: ls[1:], "receipt 1 \\(call-2\\) does not follow receipt 0"),
        (lambda ls: [ls[0], ls[2], ls[1], ls[3]], "does not follow"),
        (lambda ls: [ls[0], ls[1], forge(ls[1], tool_call_id="call-x"), *ls[2:]], "does not follow"),
        (lambda ls: [ls[0], forge(ls[1], result="wrote nothing"), *ls[2:]], "does not follow"),  # next link breaks
        (lambda ls: [*ls[:3], forge(ls[3], result="wrote nothing")], "the last one was changed"),
        (lambda ls: ls[:3], "removed from the end"),
        (lambda ls: [], "removed from the end"),
    ],
    ids=["edit-byte", "delete", "delete-first", "reorder", "insert", "forge", "forge-last", "truncate", "empty"],
)
def test_tampering_with_the_receipt_log_is_detected(log, tamper, words):
    log.write_text("".join(tamper(lines(log))))
    with pytest.raises(AgentError, match=words):
        ReceiptStore(log)


def test_a_torn_last_line_is_refused_then_repaired_explicitly(log, capsys):
    good = log.read_bytes()
    log.write_bytes(good + b'{"receipt_id": "ab')  # a crash in the middle of an append
    with pytest.raises(AgentError, match=r"line 5 \(byte offset \d+\) is torn .*fs-agent receipts repair"):
        ReceiptStore(log)
    assert main(["receipts", "verify", str(log)]) == 2 and "is torn" in capsys.readouterr().err
    assert main(["receipts", "repair", str(log)], out=io.StringIO()) == 0
    assert log.read_bytes() == good and len(ReceiptStore(log).all()) == 4


def test_a_missing_final_newline_is_never_glued_onto(log):
    log.write_bytes(log.read_bytes()[:-1])
    with pytest.raises(AgentError, match="is torn"):
        ReceiptStore(log)


def test_an_append_after_a_line_torn_since_opening_is_refused(log):
    store = ReceiptStore(log)
    good = log.read_bytes()
    log.write_bytes(good + b'{"receipt_id": "ab')  # another writer died mid-append after this store opened
    with pytest.raises(AgentError, match="last line is torn .* refusing to append onto it"):
        store.put(EffectReceipt("call-9", "write_file", {"path": "f9"}, "ok", "wrote f9", ("f9",)))
    assert log.read_bytes() == good + b'{"receipt_id": "ab'  # nothing glued on


def test_a_receipt_log_that_is_a_fifo_is_refused_not_read_or_written(tmp_path):
    os.mkfifo(tmp_path / "log.jsonl")
    with pytest.raises(AgentError, match="not a regular file"):
        ReceiptStore(tmp_path / "log.jsonl")


def test_a_receipt_line_with_a_key_twice_is_refused(log):
    first, *rest = lines(log)
    log.write_text(first.replace('"exit_state": "ok"', '"exit_state": "ok", "exit_state": "ok"', 1) + "".join(rest))
    with pytest.raises(AgentError, match="line 1 .*key 'exit_state' appears twice"):
        ReceiptStore(log)


def test_the_anchor_is_required_and_a_crash_before_its_update_is_accepted(log):
    anchor = anchor_path(log)
    saved = anchor.read_text()
    store = ReceiptStore(log)
    store.put(EffectReceipt("call-5", "write_file", {"path": "f5"}, "ok", "wrote f5", ("f5",)))
    anchor.write_text(saved)  # the anchor one append behind: what a kill between the two writes leaves
    assert len(ReceiptStore(log).all()) == 5 and json.loads(anchor.read_text())["count"] == 5
    anchor.unlink()
    with pytest.raises(AgentError, match="anchor r.jsonl.head is missing"):
        ReceiptStore(log)


def test_deeply_nested_receipt_lines_are_an_error(tmp_path):
    (tmp_path / "r.jsonl").write_text(DEEP + "\n")
    with pytest.raises(AgentError, match="line 1 .*JSON nested deeper"):
        ReceiptStore(tmp_path / "r.jsonl")


# --- commands -----------------------------------------------------------------------------------------------------


def test_commands_see_a_minimal_environment(root, monkeypatch):
    monkeypatch.setenv("FS_TEST_SECRET", "hunter2")
    monkeypatch.setenv("FS_TEST_SHARED", "ok")
    argv = [sys.executable, "-c", "import os, json; print(json.dumps(dict(os.environ)))"]
    env = json.loads(workspace(root, allowed_commands=(tuple(argv),)).run_command(argv).split("output:\n")[1])
    assert "FS_TEST_SECRET" not in env and env["HOME"] == str(root.resolve()) and env["LANG"] == "C.UTF-8"
    assert set(env) - {"PATH", "HOME", "LANG"} <= {"LC_CTYPE"}  # (the interpreter may add LC_CTYPE itself)
    w = workspace(root, allowed_commands=(tuple(argv),), pass_env=("FS_TEST_SHARED",))
    assert json.loads(w.run_command(argv).split("output:\n")[1])["FS_TEST_SHARED"] == "ok"


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie is dead, only not yet reaped
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("timeout", [30, 1], ids=["finished", "timed-out"])
def test_background_grandchildren_do_not_survive_the_command(root, timeout):
    # finished: sh exits at once and leaves `sleep` running (its output elsewhere, so nothing waits on it);
    # timed-out: sh itself is still running when its time is up
    argv = ["sh", "-c", "sleep 777 >/dev/null 2>&1 & echo $!" + ("" if timeout == 30 else "; sleep 60")]
    w = workspace(root, allowed_commands=(tuple(argv),), command_timeout_seconds=timeout)
    t0 = time.monotonic()
    out = w.run_command(argv)
    pid = int(out.split("output:\n")[1].split()[0])
    time.sleep(0.2)
    assert not alive(pid) and time.monotonic() - t0 < (5 if timeout == 30 else 10)
    assert out.startswith("status: timeout" if timeout == 1 else "status:")


def test_command_output_that_is_not_utf8_is_replaced(root):
    argv = [sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'caf\\xe9')"]
    assert workspace(root, allowed_commands=(tuple(argv),)).run_command(argv) == "status: 0\noutput:\ncaf\ufffd"


# --- model output -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response",
    [
        '{"tool": "write_file", "path": "a.txt", "content": "\\ud800"}',
        '{"tool": "read_file", "path": "\\udc80"}',
        '{"final": "done \\ud800"}',
    ],
)
def test_lone_surrogates_in_an_action_are_an_error_observation(root, response):
    with pytest.raises(AgentError, match="unpaired surrogate"):
        parse_action(response)
    w = workspace(root)
    action = ToolAction("write_file", {"path": "a.txt", "content": "\ud800"})
    assert w.execute(action).startswith("error: arguments holds an unpaired surrogate")
    assert not (root / "a.txt").exists()


def test_a_response_nested_too_deeply_is_an_error():
    with pytest.raises(AgentError, match="nested too deeply"):
        parse_action(DEEP)


# --- the CLI ------------------------------------------------------------------------------------------------------


class Stdin(io.StringIO):
    def isatty(self):
        return False


@pytest.fixture
def saved_run(tmp_path, monkeypatch):
    """A saved run (checkpoint + prefix) made with a double model whose weights digest is 'a' * 64."""
    import fs_agent.cli_common as common
    import fs_agent.cli_run as cli_run
    from doubles import CharacterTokenizer, DenseEosModel, tool

    model = DenseEosModel()
    model.weights_digest = "a" * 64
    monkeypatch.setattr(common, "load_for", lambda args: (model, CharacterTokenizer()))
    monkeypatch.setattr(cli_run, "generate_response", lambda *a, **k: tool("read_file", path="app.py"))
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("answer = 2\n")
    run = tmp_path / "run"
    assert main(["run", "--root", str(root), "--model", "m", "--save-run", str(run), "x"], Stdin(), io.StringIO()) == 0
    (tmp_path / "case.json").write_text(json.dumps({"final_contains": "done"}))
    return run, model, tmp_path


def fork(run, tmp_path, *branches, extra=()):
    # the doubles' character tokenizer is not one llguidance can read: these branches decode freely
    args = ["fork", str(run), "--case", str(tmp_path / "case.json"), "--max-tokens", "2", "--no-constrain", *extra]
    for b in branches:
        args += ["--branch", b]
    return main(args, Stdin(), io.StringIO())


@pytest.mark.parametrize("spec", ["../../victim=s", "/abs/dir=s", "=s", ".=s", "..=s", "a/b=s", "x y=s", "_x=s"])
def test_branch_names_cannot_reach_outside_branches(saved_run, spec, capsys):
    run, _, tmp_path = saved_run
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    (run / "branches").mkdir(exist_ok=True)
    (run / "branches" / "marker").write_text("stays")
    assert fork(run, tmp_path, spec) == 2
    assert "branch name" in capsys.readouterr().err
    assert (victim / "keep.txt").read_text() == "keep" and (run / "branches" / "marker").exists()


def test_an_existing_branch_needs_overwrite_and_fs_made_it(saved_run, capsys):
    run, _, tmp_path = saved_run
    assert fork(run, tmp_path, "a=go") == 0
    assert fork(run, tmp_path, "a=go") == 2 and "pass --overwrite" in capsys.readouterr().err
    assert fork(run, tmp_path, "a=go", extra=["--overwrite"]) == 0
    foreign = run / "branches" / "mine"
    foreign.mkdir()
    (foreign / "data").write_text("precious")
    assert fork(run, tmp_path, "mine=go", extra=["--overwrite"]) == 2
    assert "was not created by fs-agent fork" in capsys.readouterr().err and (foreign / "data").exists()


@pytest.mark.parametrize(
    "branches,extra,words",
    [
        (["a"], [], "expected NAME[:CHOICE]=STEERING with a non-empty steering message"),
        (["a= "], [], "expected NAME[:CHOICE]=STEERING"),
        (["a:rm=go"], [], "tool choice 'rm': use auto, required, none or an enabled tool (list_files, read_file)"),
        (["a:write_file=go"], [], "tool choice 'write_file'"),  # not enabled without --allow-writes
        (["a=x", "a=y"], [], "--branch names must differ"),
        (["a=x"], ["--select", "b"], "--select 'b' names no --branch (a)"),
        (["a:none=x"], [], "a tool choice works through the action schema: drop --no-constrain"),
    ],
)
def test_bad_branch_specs_are_refused_before_anything_runs(saved_run, capsys, branches, extra, words):
    """Every --branch is checked (name, steering, first-step tool choice against the enabled tools) and --select
    against the names before a model loads or a branch directory is made."""
    run, _, tmp_path = saved_run
    assert fork(run, tmp_path, *branches, extra=extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("fs-agent: error: ") and words in err and "Traceback" not in err
    assert not (run / "branches" / "a").exists()


def test_a_prefix_saved_with_other_weights_is_refused(saved_run, capsys):
    run, model, tmp_path = saved_run
    model.weights_digest = "b" * 64  # same shapes, other weights
    assert fork(run, tmp_path, "a=go") == 2
    assert "refusing to load it" in capsys.readouterr().err


@pytest.mark.parametrize(
    "case,words",
    [
        ({"final_contains": "x", "files": [{"path": "a"}]}, "files[0] must be an object with keys content, path"),
        ({"final_contains": 5}, "must be an object ('final_contains', where given, a string)"),
        ({"final_contains": " "}, "final substring must not be blank"),
        ({}, "an evaluation case must expect something: final_contains, files, results or receipts"),
        ({"final_contains": "x", "receipts": [{"tool": "t"}]}, "receipts[0] must be an object with keys"),
        ({"final_contains": "x", "extra": 1}, "unknown keys ['extra']"),
        ([1], "must be an object ('final_contains', where given, a string)"),
    ],
)
def test_bad_case_files_are_one_error_line(saved_run, capsys, case, words):
    run, _, tmp_path = saved_run
    (tmp_path / "case.json").write_text(json.dumps(case))
    assert fork(run, tmp_path, "a=go") == 2
    err = capsys.readouterr().err
    assert err.startswith("fs-agent: error: ") and words in err and "Traceback" not in err


@pytest.mark.parametrize(
    "name,data,words",
    [
        ("run.json", "[1]", "run.json: must be an object with string 'root'"),
        ("run.json", DEEP, "run.json: JSON nested deeper"),
        ("checkpoint.json", DEEP, "checkpoint.json: JSON nested deeper"),
        ("checkpoint.json", '{"model": 1}', "checkpoint.json: not a valid checkpoint"),
        ("prefix.safetensors", "garbage", "prefix.safetensors: not a readable prompt-cache file"),
    ],
)
def test_bad_run_files_are_one_error_line(saved_run, capsys, name, data, words):
    run, _, tmp_path = saved_run
    (run / name).write_text(data)
    assert fork(run, tmp_path, "a=go") == 2
    err = capsys.readouterr().err
    assert err.startswith("fs-agent: error: ") and words in err and "Traceback" not in err


def test_resolve_path_names_files_with_the_same_rules(root, tmp_path):
    (root / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    w = workspace(root)
    assert w.resolve_path("./sub/inside.txt") == root.resolve() / "sub" / "inside.txt"
    assert w.resolve_path("sub/new.txt", must_exist=False) == root.resolve() / "sub" / "new.txt"
    for raw, words in [
        ("link/inside.txt", "symlinks are not accessible"),
        ("nope/x", "path is not accessible"),
        ("../x", "path must be relative"),
        (".fs-agent", "path is not accessible"),
    ]:
        with pytest.raises(AgentError, match=words):
            w.resolve_path(raw, must_exist=False)


def test_commands_still_go_through_the_subprocess_run_seam(root, monkeypatch):
    """specs/agent.md: tests replace ``fs_agent.workspace.subprocess.run``; the runner must call it."""
    from types import SimpleNamespace

    from fs_agent import workspace as workspace_module

    calls = []

    def fake_run(argv, **kw):
        calls.append((argv, kw["cwd"], kw["env"]["HOME"], kw["start_new_session"]))
        return SimpleNamespace(returncode=3, stdout=b"focused ", stderr="fail\n")

    monkeypatch.setattr(workspace_module.subprocess, "run", fake_run)
    w = workspace(root, allowed_commands=(("python", "-c", "print(1)"),))
    assert w.execute(ToolAction("run_command", {"argv": ["python", "-c", "print(1)"]})) == (
        "status: 3\noutput:\nfocused fail\n"
    )
    assert calls == [(["python", "-c", "print(1)"], root.resolve(), str(root.resolve()), True)]
