"""Days 1 and 4: protocol, loop, checkpoint and resume."""

import dataclasses

import pytest

import fs_agent
from doubles import FakeCheckpointModel, FakeWorkspace, final, responses, tool
from fs_agent import (
    AgentError,
    AgentLimits,
    FinalAction,
    ToolAction,
    build_system_prompt,
    create_checkpoint,
    initial_messages,
    parse_action,
    resume_agent,
    run_agent,
    run_to_checkpoint,
)
from fs_agent import loop as loop_module


def test_star_import_exposes_the_44_names():
    ns = {}
    exec("from fs_agent import *", ns)
    assert len(fs_agent.__all__) == 44 and all(n in ns for n in fs_agent.__all__)


@pytest.mark.parametrize(
    "text,words",
    [
        ("not json", "response is not valid JSON"),
        ('{"final": "a"} {"final": "b"}', "response is not valid JSON"),
        ("[1]", "response must be a JSON object"),
        ('{"final": "x", "tool": "read_file"}', "final action must contain only a string 'final' field"),
        ('{"final": 3}', "final action must contain only"),
        ('{"final": "  "}', "final response must not be empty"),
        ('{"path": "x"}', "tool action requires a string 'tool' field"),
        ('{"tool": "rm"}', "unknown tool: rm"),
        ('{"tool": "edit_file", "path": "a"}', "missing fields for edit_file: new, old"),
        ('{"tool": "read_file", "path": "a", "mode": "r", "x": 1}', "unexpected fields for read_file: mode, x"),
        ('{"tool": "read_file", "path": 1}', "path must be a string"),
        ('{"tool": "write_file", "path": "a", "content": 1}', "content must be a string"),
        ('{"tool": "run_command", "argv": []}', "argv must be a non-empty array of non-empty strings"),
        ('```json\n{"final": "x"}\n```', "response is not valid JSON"),
    ],
)
def test_parse_errors(text, words):
    with pytest.raises(AgentError, match=words):
        parse_action(text)
    assert issubclass(AgentError, ValueError)


def test_parse_successes_and_enablement():
    assert parse_action('{"tool":"read_file","path":"README.md"}') == ToolAction("read_file", {"path": "README.md"})
    assert parse_action('{"tool":"list_files"}') == ToolAction("list_files", {})
    assert parse_action(' {"final":"done"} ') == FinalAction("done")
    with pytest.raises(AgentError, match="tool is not enabled: write_file"):
        parse_action(tool("write_file", path="a", content="b"), {"read_file"})


def test_run_completes_and_appends_tool_results(tmp_path):
    ws = FakeWorkspace(tmp_path)
    seen = []
    run = run_agent("read it", responses(tool("read_file", path="README.md"), final("ok")), ws, on_event=seen.append)
    assert run.completed and run.reason == "completed" and run.final == "ok" and len(run.events) == 2
    assert ws.executed == [ToolAction("read_file", {"path": "README.md"})] and seen == list(run.events)
    assert run.events[0].result == "README contents" and run.modified_files == ()


def test_limits(tmp_path):
    with pytest.raises(ValueError, match="agent limits must be positive"):
        AgentLimits(max_steps=0)
    bad = run_agent("t", responses("x", "y", "z"), FakeWorkspace(tmp_path))
    assert bad.reason == "invalid_action_limit" and all(e.result.startswith("error: ") for e in bad.events)
    same = tool("read_file", path="a")
    loop = run_agent("t", responses(same, same, same), FakeWorkspace(tmp_path))
    assert loop.reason == "repeated_action_limit" and loop.events[-1].result == "error: identical action loop detected"
    steps = run_agent(
        "t",
        responses(*[tool("read_file", path=str(i)) for i in range(3)]),
        FakeWorkspace(tmp_path),
        AgentLimits(max_steps=3),
    )
    assert steps.reason == "step_limit"
    ctx = run_agent("t", responses(final("x")), FakeWorkspace(tmp_path), AgentLimits(max_context_chars=10))
    assert ctx.reason == "context_limit" and ctx.events == ()
    with pytest.raises(ValueError, match="task must not be empty"):
        run_agent("  ", responses(), FakeWorkspace(tmp_path))


def test_invalid_responses_are_shown_to_the_model(tmp_path):
    seen = []

    def generate(messages):
        seen.append([dict(m) for m in messages])
        return ["oops", final("done")][len(seen) - 1]

    run = run_agent("t", generate, FakeWorkspace(tmp_path))
    assert run.completed
    assert seen[1][-2] == {"role": "assistant", "content": "oops"}
    assert seen[1][-1]["content"].startswith("Tool result:\nerror: response is not valid JSON")


def test_append_seam_is_used(tmp_path, monkeypatch):
    calls = []
    real = loop_module._append_tool_result
    monkeypatch.setattr(loop_module, "_append_tool_result", lambda m, r, res: calls.append(res) or real(m, r, res))
    run_agent("t", responses(tool("read_file", path="a"), final("x")), FakeWorkspace(tmp_path))
    assert calls == ["README contents"]


def test_system_prompt_lists_only_enabled_tools(tmp_path):
    prompt = build_system_prompt(_ws(tmp_path))
    assert '"tool":"list_files"' in prompt and '"tool":"read_file"' in prompt and '"tool":"write_file"' not in prompt
    assert initial_messages("t", "s") == [{"role": "system", "content": "s"}, {"role": "user", "content": "t"}]


def _ws(tmp_path):
    from fs_agent import ToolPolicy, Workspace

    return Workspace(ToolPolicy(tmp_path))


def test_checkpoint_identity_and_resume(tmp_path):
    model = FakeCheckpointModel([tool("read_file", path="README.md"), final("resumed")])
    cp = run_to_checkpoint("read it", model, FakeWorkspace(tmp_path))
    assert cp.model.conversation_position == len(cp.messages) == 4
    assert set(f.name for f in dataclasses.fields(cp)) == {"checkpoint_id", "task", "messages", "model"}
    cp.validate()
    for change in (dict(task="other"), dict(messages=(*cp.messages[:-1], ("user", "Tool result:\nREADME contentz")))):
        with pytest.raises(AgentError, match="identity does not match"):
            dataclasses.replace(cp, **change).validate()
    run = resume_agent(cp, model, FakeWorkspace(tmp_path))
    assert run.completed and run.final == "resumed"
    with pytest.raises(AgentError, match="run ended before checkpoint: completed"):
        run_to_checkpoint("t", FakeCheckpointModel([final("x")]), FakeWorkspace(tmp_path))
    with pytest.raises(AgentError, match="generator does not support checkpoints"):
        run_to_checkpoint("t", responses(tool("read_file", path="a")), FakeWorkspace(tmp_path))
    with pytest.raises(ValueError, match="after_tool_calls must be a positive integer"):
        run_to_checkpoint("t", model, FakeWorkspace(tmp_path), after_tool_calls=0)
    with pytest.raises(AgentError, match="model checkpoint is invalid"):
        create_checkpoint("t", [], "nope")


def test_checkpoint_file_roundtrip(tmp_path):
    from fs_agent.checkpoint import load_agent_checkpoint, save_agent_checkpoint

    cp = run_to_checkpoint("read it", FakeCheckpointModel([tool("read_file", path="a")]), FakeWorkspace(tmp_path))
    save_agent_checkpoint(cp, tmp_path / "cp.json")
    assert load_agent_checkpoint(tmp_path / "cp.json") == cp
    text = (tmp_path / "cp.json").read_text().replace("read it", "read IT")
    (tmp_path / "cp.json").write_text(text)
    with pytest.raises(AgentError, match="identity does not match"):
        load_agent_checkpoint(tmp_path / "cp.json")
