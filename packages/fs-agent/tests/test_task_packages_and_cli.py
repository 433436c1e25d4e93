"""Evaluation packages (held-out checks, forbidden modifications) and the fs-agent CLI."""

import io
import json
import shutil

import pytest

from fs_agent import ToolAction
from fs_agent.cli import ask, main
from fs_agent.task_packages import EVALS, PackageError, grade_package, load_package

PACKAGES = ["localized-constant", "repository-convention", "failure-recovery"]


@pytest.mark.parametrize("name", PACKAGES)
def test_shipped_packages_are_valid_and_the_untouched_baseline_fails(name):
    pkg = load_package(EVALS / name)
    assert pkg.task["id"] == name
    result = grade_package(EVALS / name)
    assert result["status"] == "failed" and result["forbidden_modifications"] == [] and result["changed"] == []


def test_a_correct_agent_passes_and_a_careless_one_is_caught():
    def solve(root, prompt, max_steps):
        text = (root / "answer.py").read_text()
        (root / "answer.py").write_text(text.replace("ANSWER = 41", "ANSWER = 42"))

    assert grade_package(EVALS / "localized-constant", solve)["status"] == "passed"

    def careless(root, prompt, max_steps):
        solve(root, prompt, max_steps)
        (root / "README.md").write_text("changed\n")

    r = grade_package(EVALS / "localized-constant", careless)
    assert r["status"] == "failed" and r["forbidden_modifications"] == ["README.md"]

    def bool_not_number(root, prompt, max_steps):
        cfg = json.loads((root / "config.json").read_text())
        cfg["parser"]["strict"] = 1  # JSON equality distinguishes true from 1
        (root / "config.json").write_text(json.dumps(cfg, indent=2))

    checks = grade_package(EVALS / "repository-convention", bool_not_number)["checks"]
    assert [c["passed"] for c in checks] == [False, True, True]
    assert (EVALS / "localized-constant/workspace/answer.py").read_text().endswith("ANSWER = 41\n")  # staged copy only


def test_invalid_packages(tmp_path):
    pkg = tmp_path / "p"
    shutil.copytree(EVALS / "localized-constant", pkg)
    (pkg / "extra.txt").write_text("x")
    with pytest.raises(PackageError, match="top level must be exactly"):
        load_package(pkg)
    (pkg / "extra.txt").unlink()
    (pkg / "task.json").write_text('{"schema_version": 1, "id": "x", "id": "y"}')
    with pytest.raises(PackageError, match="duplicate keys"):
        load_package(pkg)
    task = json.loads((EVALS / "localized-constant/task.json").read_text())
    (pkg / "task.json").write_text(json.dumps(task | {"id": "Bad Id"}))
    with pytest.raises(PackageError, match="id must match"):
        load_package(pkg)
    (pkg / "task.json").write_text(json.dumps(task | {"editable_paths": ["a", "a/b"]}))
    with pytest.raises(PackageError, match="non-overlapping"):
        load_package(pkg)


class Stdin(io.StringIO):
    def __init__(self, text, tty=True):
        super().__init__(text)
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize(
    "text,tty,want",
    [
        ("y\n", True, True),
        ("YES\n", True, True),
        ("", True, False),
        ("y\n", False, False),
        ("n\n", True, False),
    ],
)
def test_approval_prompt(text, tty, want):
    out = io.StringIO()
    decision = ask(Stdin(text, tty), out)(ToolAction("run_command", {"argv": ["ls"]}))
    assert decision is want
    assert out.getvalue().startswith('approval requested> {"argv":["ls"],"tool":"run_command"}')
    assert "not confined by the workspace boundary" in out.getvalue()


def test_denial_with_a_reason():
    d = ask(Stdin("keep the requested answer at 2\n"), io.StringIO())(ToolAction("read_file", {"path": "a"}))
    assert (d.approved, d.reason) == (False, "keep the requested answer at 2")


def test_cli_run_on_a_tiny_random_model(tmp_path, capsys):
    from fs_weights import preset, write_random_checkpoint
    from fs_weights.byte_tokenizer import VOCAB_SIZE

    model = write_random_checkpoint(tmp_path / "m", preset("tiny", vocab_size=VOCAB_SIZE), tokenizer="bytes")
    root = tmp_path / "ws"
    root.mkdir()
    out = io.StringIO()
    code = main(
        [
            "run",
            "--root",
            str(root),
            "--model",
            str(model),
            "--max-tokens",
            "8",
            "--max-steps",
            "3",
            "fix",
            "the",
            "bug",
        ],
        stdin=Stdin("", tty=False),
        out=out,
    )
    text = out.getvalue()
    assert code == 1  # a random model never emits valid JSON: the run stops, it does not "complete"
    assert "goal> fix the bug" in text and "tools> list_files, read_file" in text
    assert "[1] model> " in text and "observation> error: response is not valid JSON" in text
    assert "stopped> invalid_action_limit" in text and "file-tool changes> []" in text
    assert main(["run", "--root", str(tmp_path / "missing"), "--model", str(model), "x"]) == 2
    assert "workspace root must exist" in capsys.readouterr().err


def test_cli_eval_baseline(capsys):
    assert main(["eval", str(EVALS / "failure-recovery"), "--baseline"], out=None) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "failed"


def test_cli_save_run_then_fork(tmp_path, monkeypatch, capsys):
    """The CLI plumbing of fork/steer/select on the Day 8 doubles: scripted first run, dense EOS model branches."""
    import fs_agent.cli_common as common
    import fs_agent.cli_run as cli_run
    from doubles import CharacterTokenizer, DenseEosModel, tool

    model = DenseEosModel()
    monkeypatch.setattr(common, "load_for", lambda args: (model, CharacterTokenizer()))
    monkeypatch.setattr(cli_run, "generate_response", lambda *a, **k: tool("read_file", path="app.py"))
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("answer = 2\n")
    (root / "logs").mkdir()
    out = io.StringIO()
    assert (
        main(
            [
                "run",
                "--root",
                str(root),
                "--model",
                "fake",
                "--save-run",
                str(tmp_path / "run"),
                "--receipt-log",
                "logs/receipts.jsonl",
                "check",
                "app",
            ],
            stdin=Stdin("", False),
            out=out,
        )
        == 0
    )
    assert "checkpoint> " in out.getvalue() and (tmp_path / "run" / "checkpoint.json").exists()
    (tmp_path / "case.json").write_text(
        json.dumps({"final_contains": "done", "files": [{"path": "app.py", "content": "answer = 2\n"}]})
    )
    out = io.StringIO()
    code = main(
        [
            "fork",
            str(tmp_path / "run"),
            "--branch",
            "a=only validate",
            "--branch",
            "b=try again",
            "--case",
            str(tmp_path / "case.json"),
            "--select",
            "a",
            "--max-tokens",
            "4",
            "--no-constrain",  # the doubles' character tokenizer is not one llguidance can read
        ],
        stdin=Stdin("", False),
        out=out,
    )
    text = out.getvalue()
    assert code == 2 and "selected branch must pass evaluation" in capsys.readouterr().err
    assert text.count(" prefix tokens (layer offsets ") == 2 and "evaluation: FAIL" in text
    for b in ("a", "b"):
        assert (tmp_path / "run" / "branches" / b / "app.py").read_text() == "answer = 2\n"
    prefill_offsets = [c[0] for c in model.calls]
    assert prefill_offsets.count(0) == 1  # fork loads the saved prefix file: no second prefill at offset 0
    assert "prefix> loaded" in text


def test_version_and_the_demo_model_by_default(tmp_path, capsys):
    import fs_agent

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"fs-agent {fs_agent.__version__}"
    (tmp_path / "app.py").write_text("answer = 1\n")
    out = io.StringIO()
    main(["run", "--root", str(tmp_path), "--max-steps", "1", "--max-tokens", "48", "look"], Stdin("", False), out)
    text = out.getvalue()
    assert "model> " in text and "demo_model" in text and "[1] model> " in text  # ran, offline, on the demo


def test_a_shipped_eval_is_found_by_name(capsys):
    assert main(["eval", "failure-recovery", "--baseline"], out=None) == 1  # the untouched baseline fails, as it should
    assert json.loads(capsys.readouterr().out)["id"] == "failure-recovery"
    names = sorted(p.name for p in EVALS.iterdir())
    assert names == ["failure-recovery", "localized-constant", "repository-convention"]


def test_every_subcommand_says_what_it_does_and_fork_documents_its_case_file(tmp_path, capsys):
    """`fs-agent --help` lists every subcommand with a line; `fork --help` carries the --case format, and the
    example in it is a case file fork accepts."""
    import json

    from fs_agent.cli import parser
    from fs_agent.cli_fork import read_case

    with pytest.raises(SystemExit):
        parser().parse_args(["--help"])
    top = capsys.readouterr().out
    for name in ("run", "fork", "eval", "receipts"):
        assert f"    {name} " in top
    with pytest.raises(SystemExit):
        parser().parse_args(["fork", "--help"])
    assert '"final_contains"' in capsys.readouterr().out
    example = {
        "final_contains": "answer = 2",
        "files": [{"path": "app.py", "content": "..."}],
        "results": [{"tool": "run", "contains": "passed"}],
        "receipts": [{"tool_call_id": "call-2", "tool": "run", "exit_state": "ok", "result_contains": "passed",
                      "changed_artifacts": []}],
    }  # fmt: skip
    (tmp_path / "case.json").write_text(json.dumps(example))
    case = read_case(str(tmp_path / "case.json"))
    assert case.final_contains == "answer = 2" and len(case.receipts) == 1


def test_eval_without_model_runs_the_demo_model_as_run_does_and_baseline_takes_none(capsys):
    """`eval` and `run` read a missing --model the same way (the demo model); grading the untouched workspace is
    its own flag, and refuses a model it would not run."""
    out = io.StringIO()
    code = main(["eval", "localized-constant", "--max-tokens", "32", "--max-steps", "1"], out=out)
    assert code in (0, 1) and "[1] model> " in out.getvalue()  # the demo model took a step
    assert main(["eval", "localized-constant", "--baseline", "--model", "x"], out=None) == 2
    assert "--baseline grades the untouched workspace" in capsys.readouterr().err


def test_a_saved_run_records_how_the_model_was_loaded_and_fork_loads_it_so(tmp_path):
    """fs-generate's load flags on every subcommand: `run --quantize int4 --adapter-path A` saves them in run.json,
    `fork` without --model loads the model the same way (the saved prefix fits it), and a fork that loads it another
    way is refused at the prefix, not handed K/V another model computed."""
    from fs_generate.demo import demo_model_path
    from fs_weights.random_adapter import write_random_adapter

    adapter = write_random_adapter(demo_model_path(), tmp_path / "adapters", rank=4, num_layers=1)
    ws, run_dir, case = tmp_path / "ws", tmp_path / "run", tmp_path / "case.json"
    ws.mkdir()
    (ws / "app.py").write_text("answer = 1\n")
    case.write_text('{"final_contains": "2"}')
    flags = ["--quantize", "int4", "--adapter-path", str(adapter)]
    run = ["run", "--root", str(ws), "--save-run", str(run_dir), "--max-steps", "3", "--tool-choice", "required"]
    assert main([*run, *flags, "Read app.py"], io.StringIO(), io.StringIO()) == 0
    meta = json.loads((run_dir / "run.json").read_text())
    assert (meta["quantize"], meta["adapter_path"], meta["dtype"]) == ("int4", str(adapter), None)
    fork = ["fork", str(run_dir), "--branch", "a=Answer now.", "--case", str(case), "--max-steps", "1"]
    out = io.StringIO()
    assert main([*fork, "--max-tokens", "16"], io.StringIO(), out) == 0
    assert "prefix> loaded " in out.getvalue()  # the same weights, loaded the same way: the prefix fits
    err = io.StringIO()
    import contextlib

    with contextlib.redirect_stderr(err):
        code = main([*fork, "--overwrite", "--model", meta["model"]], io.StringIO(), io.StringIO())
    assert code != 0 and "prefix" in err.getvalue()  # bf16 without the adapter: the saved K/V are not its own
