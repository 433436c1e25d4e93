"""Days 5-8: compaction, inspect + steer, evaluation, and the Day 8 fork/steer/select scenario end to end."""

import json
import shutil
import sys

import numpy as np
import pytest

from doubles import CharacterTokenizer, DenseEosModel, ScriptedCheckpointModel, final, tool
from fs_agent import (
    AgentError,
    ApprovalDecision,
    EvaluationCase,
    FileExpectation,
    KvPrefixGenerator,
    PrefixReuse,
    ReceiptExpectation,
    ReceiptStore,
    ResultExpectation,
    ToolPolicy,
    Workspace,
    compact_completed_interactions,
    evaluate_run,
    inspect_checkpoint,
    run_branch,
    run_to_checkpoint,
    select_branch,
)

VALIDATE = (sys.executable, "-c", "import app; assert app.answer == 2; print('answer ok')")
READ = tool("read_file", path="app.py")
EDIT = tool("edit_file", path="app.py", old="answer = 1", new="answer = 2")


def workspace(root, approve=True):
    return Workspace(
        ToolPolicy(root, allow_writes=True, allowed_commands=(VALIDATE,)),
        confirm_tool=approve if callable(approve) else (lambda a: approve),
        receipt_store=ReceiptStore(root / "receipts.jsonl"),
    )


@pytest.fixture
def prefix(tmp_path):
    root = tmp_path / "prefix"
    root.mkdir()
    (root / "app.py").write_text("answer = 1\n")
    model = ScriptedCheckpointModel([READ, EDIT])
    cp = run_to_checkpoint("set the answer to 2", model, workspace(root), after_tool_calls=2)
    return tmp_path, root, cp


CASE = EvaluationCase(
    final_contains="validated",
    files=(FileExpectation("app.py", "answer = 2\n"),),
    results=(ResultExpectation("run_command", "answer ok"),),
    receipts=(
        ReceiptExpectation("call-1", "edit_file", "ok", "edited app.py", ("app.py",)),
        ReceiptExpectation("call-2", "run_command", "ok", "status: 0"),
    ),
)


def test_day8_scenario(prefix):
    tmp, root, cp = prefix
    assert (root / "app.py").read_text() == "answer = 2\n"
    assert json.loads((root / "receipts.jsonl").read_text())["tool_call_id"] == "call-1"
    status = inspect_checkpoint(cp)
    assert status.last_action == '{"new":"answer = 2","old":"answer = 1","path":"app.py","tool":"edit_file"}'
    assert status.next_step == "resume the model after the completed edit_file observation"
    branches = {}
    for name in ("validate-only", "try-extra-edit"):
        shutil.copytree(root, tmp / name)
        branches[name] = tmp / name
    start = {n: ((d / "app.py").read_bytes(), (d / "receipts.jsonl").read_bytes()) for n, d in branches.items()}
    assert start["validate-only"] == start["try-extra-edit"]

    a = run_branch(
        "validate-only",
        "only run the validation command",
        cp,
        ScriptedCheckpointModel([READ, EDIT, tool("run_command", argv=list(VALIDATE)), final("validated")]),
        workspace(branches["validate-only"]),
        ReceiptStore(branches["validate-only"] / "receipts.jsonl"),
        CASE,
    )
    deny = lambda action: ApprovalDecision(False, "keep the requested answer at 2")  # noqa: E731
    extra = tool("edit_file", path="app.py", old="answer = 2", new="answer = 3")
    b = run_branch(
        "try-extra-edit",
        "try one more edit",
        cp,
        ScriptedCheckpointModel([READ, EDIT, READ, extra, final("kept the answer")]),
        workspace(branches["try-extra-edit"], deny),
        ReceiptStore(branches["try-extra-edit"] / "receipts.jsonl"),
        CASE,
    )
    assert a.report.passed and not b.report.passed
    assert (
        a.reuse
        == b.reuse
        == PrefixReuse(len(cp.model.cached_token_ids), cp.model.layer_offsets, len(cp.model.cached_token_ids))
    )
    log_a = (branches["validate-only"] / "receipts.jsonl").read_text().splitlines()
    assert [json.loads(x)["tool_call_id"] for x in log_a] == ["call-1", "call-2"]
    assert any(
        e.result == "error: operator denied the tool action: keep the requested answer at 2" for e in b.run.events
    )
    assert (
        (branches["try-extra-edit"] / "app.py").read_bytes(),
        (branches["try-extra-edit"] / "receipts.jsonl").read_bytes(),
    ) == start["try-extra-edit"]
    assert select_branch([a, b], "validate-only") is a
    with pytest.raises(AgentError, match="must match exactly one outcome"):
        select_branch([a, b], "absent")
    with pytest.raises(AgentError, match="must match exactly one outcome"):
        select_branch([a, a], "validate-only")
    with pytest.raises(AgentError, match="selected branch must pass evaluation"):
        select_branch([a, b], "try-extra-edit")
    with pytest.raises(ValueError, match="selected branch name must not be blank"):
        select_branch([a], " ")
    assert "evaluation: FAIL" in b.report.render() and "- receipt:call-2: FAIL (receipt is absent)" in b.report.render()


def test_steering_is_inserted_once_at_the_boundary(prefix):
    _tmp, root, cp = prefix
    model = ScriptedCheckpointModel([READ, EDIT, final("validated")])
    from fs_agent import resume_with_steering

    run = resume_with_steering(cp, "be brief", model, workspace(root))
    assert run.completed
    first = model.calls[0]
    assert first[cp.model.conversation_position] == {"role": "user", "content": "Operator steering:\nbe brief"}
    assert len(first) == cp.model.conversation_position + 1
    with pytest.raises(ValueError, match="steering must not be empty"):
        resume_with_steering(cp, " ", model, workspace(root))


def test_evaluation_reads_evidence_not_claims(prefix):
    _tmp, root, _cp = prefix
    from fs_agent import AgentRun

    run = AgentRun(True, "completed", "validated", ())
    report = evaluate_run(run, workspace(root), ReceiptStore(root / "receipts.jsonl"), CASE)
    names = [(c.name, c.passed) for c in report.checks]
    assert names == [
        ("final", True),
        ("file:app.py", True),
        ("result:run_command", False),
        ("receipt:call-1", True),
        ("receipt:call-2", False),
    ]
    (root / "receipts.jsonl").write_text((root / "receipts.jsonl").read_text().replace("edited", "EDITED"))
    report = evaluate_run(run, Workspace(ToolPolicy(root)), ReceiptStore(), CASE)
    assert report.checks[3].detail == "receipt is absent"
    tampered = evaluate_run(run, Workspace(ToolPolicy(root)), _store_without_loading(root), CASE)
    assert tampered.checks[3].detail.startswith("receipt evidence unavailable: receipt digest does not match")
    with pytest.raises(ValueError, match="workspace must be a Workspace"):
        evaluate_run(run, object(), ReceiptStore(), CASE)
    with pytest.raises(ValueError, match="file path must be a relative file path"):
        FileExpectation("../x", "")


def _store_without_loading(root):
    store = ReceiptStore()
    store.path = root / "receipts.jsonl"  # evaluate_run re-opens it, which re-verifies every digest
    return store


def test_compaction_replaces_receipt_backed_observations(prefix):
    from fs_agent import EffectReceipt

    _tmp, root, cp = prefix
    messages = [{"role": r, "content": c} for r, c in cp.messages]
    receipts = ReceiptStore(root / "receipts.jsonl").all()
    count = lambda ms: sum(len(m["content"]) for m in ms)  # noqa: E731
    short = compact_completed_interactions(messages, receipts, count, keep_recent=0)
    assert short.compacted_interactions == 0  # "edited app.py" is shorter than any record: no saving, no change
    output = "status: 0\noutput:\n" + "test passed\n" * 60
    cmd = tool("run_command", argv=list(VALIDATE))
    long_messages = [
        *messages,
        {"role": "assistant", "content": cmd},
        {"role": "user", "content": "Tool result:\n" + output},
        {"role": "assistant", "content": cmd},
        {"role": "user", "content": "Tool result:\n" + output},
    ]
    runs = [EffectReceipt(f"call-{i}", "run_command", {"argv": list(VALIDATE)}, "ok", output) for i in (2, 3)]
    res = compact_completed_interactions(long_messages, receipts + runs, count, result_preview_chars=11)
    # keep_recent=1: the edit and the first run are compacted (the edit's record is longer, the total is shorter)
    assert res.compacted_interactions == 2 and res.receipt_ids == (receipts[0].receipt_id, runs[0].receipt_id)
    record = res.messages[-3]["content"]
    assert record.startswith("Completed tool interaction (compacted evidence):\n")
    body = json.loads(record.split("\n", 1)[1])
    assert (
        body["result_preview"] == f"status: 0\no… [{len(output) - 11} chars omitted]" and body["tool"] == "run_command"
    )
    assert res.messages[-1]["content"] == "Tool result:\n" + output and res.saved_tokens > 0
    again = compact_completed_interactions(list(res.messages), receipts + runs, count, keep_recent=0)
    assert again.compacted_interactions == 1  # only the pair kept last time is left to compact
    assert long_messages[-3]["content"] == "Tool result:\n" + output  # input untouched


def test_kv_prefix_generator_contract_with_the_dense_eos_model():
    model, tok = DenseEosModel(), CharacterTokenizer()
    gen = KvPrefixGenerator(model, tok, max_tokens=4)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    with pytest.raises(AgentError, match="restore the checkpoint before generating"):
        gen(msgs)
    with pytest.raises(AgentError, match="save a prefix checkpoint before forking"):
        gen.fork()
    cp = gen.save_checkpoint(msgs)
    n = len(cp.cached_token_ids)
    assert cp.layer_offsets == (n, n) and gen.reuse == PrefixReuse(n, (n, n), n)
    assert [(c[0], c[1]) for c in model.calls] == [(0, n)]
    frozen = [c.key_values for c in model.calls[0][2]]
    snapshot = [(k.copy(), v.copy()) for k, v in frozen]
    with pytest.raises(AgentError, match="prefix checkpoint was already saved"):
        gen.save_checkpoint(msgs)
    a, b = gen.fork(), gen.fork()
    for g, extra in ((a, "steer A"), (b, "steer B")):
        g.restore_checkpoint(cp)
        assert g([*msgs, {"role": "user", "content": extra}]) == ""  # the model puts all mass on EOS
    offsets = [c[0] for c in model.calls[1:]]
    assert offsets == [n, n] and all(c[0] != 0 for c in model.calls[1:])  # never re-prefilled at offset 0
    for (k, v), (k0, v0) in zip(frozen, snapshot, strict=True):
        np.testing.assert_array_equal(k, k0)
        np.testing.assert_array_equal(v, v0)
    assert model.calls[1][3] == [id(kv[0]) for kv in frozen]  # a branch starts from the frozen arrays themselves
    changed = [dict(m) for m in msgs]
    changed[1]["content"] = "tasK"  # same length, different token
    with pytest.raises(AgentError, match="steered prompt does not extend the saved token prefix"):
        a([*changed, {"role": "user", "content": "x"}])
    with pytest.raises(AgentError, match="model checkpoint does not match the saved KV prefix"):
        a.restore_checkpoint(cp.__class__(cp.conversation_position, 5, cp.cached_token_ids, cp.layer_offsets))
    with pytest.raises(ValueError, match="max_tokens must be a positive integer"):
        KvPrefixGenerator(model, tok, 0)
