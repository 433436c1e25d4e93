"""Concurrent branches (``run_branches``) on a real tiny model: the same outcomes and receipt bytes as running each
branch alone with ``run_branch``, from one shared prefix prefilled once in one engine."""

import shutil

import pytest

from doubles import tool
from fs_agent import (
    AgentLimits,
    Branch,
    EvaluationCase,
    FileExpectation,
    KvPrefixGenerator,
    ReceiptStore,
    ToolPolicy,
    Workspace,
    build_system_prompt,
    create_checkpoint,
    initial_messages,
    run_branch,
    run_branches,
)
from fs_agent.loop import TOOL_RESULT

CASE = EvaluationCase(final_contains="done", files=(FileExpectation("app.py", "answer = 2\n"),))
# actions short enough for a random model to finish in 24 tokens: real reads, listings and answers
SHORT_ACTIONS = {
    "anyOf": [
        {"type": "object", "properties": {"final": {"type": "string", "minLength": 1, "maxLength": 6}},
         "required": ["final"], "additionalProperties": False},
        {"type": "object", "properties": {"tool": {"const": "read_file"}, "path": {"enum": ["app.py", "nope.py"]}},
         "required": ["tool", "path"], "additionalProperties": False},
        {"type": "object", "properties": {"tool": {"const": "list_files"}}, "required": ["tool"],
         "additionalProperties": False},
    ]
}  # fmt: skip
STEERING = {"validate-only": "only run the validation command", "try-extra-edit": "try one more edit"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, qwen3_tokenizer_dir):
    """A random tiny Qwen3 in bf16 (the fast, batch-invariant kernels) with the real tokenizer and template."""
    from fs_generate import load
    from fs_model import cpu
    from fs_weights import preset, write_random_checkpoint

    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: the engine's bitwise contract needs the fast kernels")
    d = write_random_checkpoint(
        tmp_path_factory.mktemp("agent") / "bf16", preset("tiny"), dtype="bfloat16", tokenizer=qwen3_tokenizer_dir
    )
    return load(str(d))


def workspace(root):
    policy = ToolPolicy(root, allow_writes=True, allowed_commands=())
    return Workspace(policy, confirm_tool=lambda a: True, receipt_store=ReceiptStore(root / "receipts.jsonl"))


@pytest.mark.parametrize("constrained", [False, True], ids=["free", "action-schema"])
def test_concurrent_branches_equal_sequential_ones(tiny, tmp_path, constrained):
    """Free, a random model's replies are invalid actions; under the action schema they are real tool calls (files
    read and written): either way each branch's run, files and receipts are the sequential ones."""
    model, tok = tiny
    root = tmp_path / "prefix"
    root.mkdir()
    (root / "app.py").write_text("answer = 1\n")
    (root / "receipts.jsonl").write_text("")
    task = "set the answer to 2"
    messages = [
        *initial_messages(task, build_system_prompt(workspace(root))),
        {"role": "assistant", "content": tool("read_file", path="app.py")},
        {"role": "user", "content": TOOL_RESULT + "answer = 1\n"},
    ]
    schema = SHORT_ACTIONS if constrained else None
    base = KvPrefixGenerator(model, tok, max_tokens=24, json_schema=schema)
    cp = create_checkpoint(task, messages, base.save_checkpoint(messages))
    limits = AgentLimits(max_steps=3)
    dirs = {}
    for way in ("sequential", "concurrent"):
        for name in STEERING:
            dirs[way, name] = tmp_path / way / name
            shutil.copytree(root, dirs[way, name])
    alone = [
        run_branch(
            name,
            steer,
            cp,
            base.fork(),
            workspace(dirs["sequential", name]),
            ReceiptStore(dirs["sequential", name] / "receipts.jsonl"),
            CASE,
            limits,
        )
        for name, steer in STEERING.items()
    ]
    together = run_branches(
        [
            Branch(
                name,
                steer,
                workspace(dirs["concurrent", name]),
                ReceiptStore(dirs["concurrent", name] / "receipts.jsonl"),
                CASE,
            )
            for name, steer in STEERING.items()
        ],
        cp,
        model,
        tok,
        max_tokens=24,
        limits=limits,
        json_schema=schema,
    )
    n = len(cp.model.cached_token_ids)
    for a, b in zip(alone, together, strict=True):
        assert (a.name, a.steering, a.run) == (b.name, b.steering, b.run)
        assert a.report.render() == b.report.render()
        assert (a.reuse.reused_tokens, a.reuse.layer_offsets) == (b.reuse.reused_tokens, b.reuse.layer_offsets)
        assert n - 16 < b.reuse.avoided_prefill_tokens <= n  # the prefix's full blocks, from the engine's cache
        for f in ("app.py", "receipts.jsonl"):
            assert (dirs["sequential", a.name] / f).read_bytes() == (dirs["concurrent", a.name] / f).read_bytes()
    assert len({e.response for o in together for e in o.run.events}) > 1  # the branches really differ
    if constrained:
        assert all(e.action is not None for o in together for e in o.run.events)


def test_run_branches_refuses_duplicate_names(tiny, tmp_path):
    model, tok = tiny
    b = Branch("x", "go", None, None, CASE)
    with pytest.raises(ValueError, match="distinct names"):
        run_branches([b, b], None, model, tok, max_tokens=4)  # type: ignore[arg-type]
