"""``fs-agent walkthrough``: run -> fork -> steer -> select on the shipped demo model, end to end, as docs/agent.md
shows it. The demo model follows no instructions, so what it may do decides the outcome: the steered branch's
first step is forced to the allowed command, the other branch must answer at once, and only the first shows the
observed output the case asks for. Each assertion is a fact a user reads off the printout."""

import io
import json

from fs_agent.cli import main


def test_the_walkthrough_forks_two_steered_branches_from_one_prefix_and_keeps_the_passing_one(tmp_path):
    d = tmp_path / "wt"
    out = io.StringIO()
    assert main(["walkthrough", str(d)], io.StringIO(), out) == 0
    text = out.getvalue()
    assert text.count("$ fs-agent ") == 3 and "checkpoint> " in text
    n = int(text.split("prefix> loaded ")[1].split()[0])  # the checkpoint's tokens, loaded once from the file
    assert text.count(f"reused {n} prefix tokens") == 2 and text.count(f"avoided prefill of {n}") == 2
    check, guess = text.split("branch> check: steering")[1].split("branch> guess: steering")
    assert "evaluation: PASS" in check and "evaluation: FAIL" in guess
    assert check.count("approval> approved (--yes)") == 1  # forced once, then the branch's own choice (auto)
    assert "status: 0\noutput:\n1" in check and "receipts> 1 in " in check and "receipts> 0 in " in guess
    assert json.loads((d / "run" / "selected.json").read_text())["branch"] == "check"
    assert "1 receipts, chain and anchor verified" in text.rsplit("$ fs-agent receipts verify", 1)[1]
    log = d / "run" / "branches" / "check" / ".fs-agent" / "receipts.jsonl"
    (receipt,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert receipt["tool"] == "run_command" and receipt["exit_state"] == "ok"
    assert (d / "ws" / "app.py").read_text() == "answer = 1\nprint(answer)\n"  # branches work on copies
    assert main(["walkthrough", str(d)], io.StringIO(), io.StringIO()) == 2  # never over an earlier one
