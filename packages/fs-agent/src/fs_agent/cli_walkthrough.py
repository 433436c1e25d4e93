"""``fs-agent walkthrough [DIR]``: run -> fork -> select on the shipped demo model, as the commands a user would type
(each printed before it runs), in a fresh directory. Offline, ~10 s on two cores.

The demo model (4.2M parameters, trained on the Python documentation) follows no instructions, so the walkthrough
steers by what each branch may do rather than by what it is told alone: under the action schema every path and
command it can name exists, `run` forces a tool call per step (``--tool-choice required``), and each branch's first
step has its own tool choice. The case grades what can be observed, not the model's prose."""

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import TextIO

from .protocol import AgentError

WALKTHROUGH = __doc__.split("\n\n", 1)[1] if __doc__ else ""
APP = "answer = 1\nprint(answer)\n"
CASE = {"results": [{"tool": "run_command", "contains": "status: 0\noutput:\n1"}]}  # the branch ran app.py: "1"


def commands(d: Path, python: str) -> list[list[str]]:
    """The walkthrough's fs-agent command lines, in order."""
    allow = ["--allow-command", f"{python} app.py", "--yes"]
    run = ["run", "--root", str(d / "ws"), *allow, "--tool-choice", "required", "--save-run", str(d / "run")]
    fork = ["fork", str(d / "run"), *allow, "--case", str(d / "case.json"), "--max-steps", "2", "--max-tokens", "96"]
    branches = ["--branch", "check:run_command=Run app.py to see what it prints.",
                "--branch", "guess:none=Answer from what you have seen."]  # fmt: skip
    log = d / "run" / "branches" / "check" / ".fs-agent" / "receipts.jsonl"
    return [
        [*run, "--checkpoint-after", "1", "--max-tokens", "64", "Find out what app.py prints."],
        [*fork, *branches, "--select", "check"],
        ["receipts", "verify", str(log)],
    ]


def cmd_walkthrough(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    from .cli import main  # the subcommands exactly as typed (cli imports this module)

    d = Path(args.dir)
    if d.exists() and (not d.is_dir() or any(d.iterdir())):
        raise AgentError(f"{d} exists and is not an empty directory: the walkthrough writes into a fresh one")
    (d / "ws").mkdir(parents=True, exist_ok=True)
    (d / "ws" / "app.py").write_text(APP)
    (d / "case.json").write_text(json.dumps(CASE) + "\n")
    print(f"walkthrough> {d}/ws/app.py: {APP!r}; {d}/case.json: {json.dumps(CASE)}", file=out)
    python = "python3" if shutil.which("python3") else sys.executable  # what the allowed command runs
    for argv in commands(d, python):
        print(f"$ fs-agent {shlex.join(argv)}", file=out, flush=True)
        code = main(argv, stdin, out)
        if code:
            return code
    return 0
