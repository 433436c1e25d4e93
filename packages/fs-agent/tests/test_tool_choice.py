"""Tool choice and the workspace-narrowed action schema: what a constrained response may name is what exists.

A plausible mistake each test catches: a protected file or the receipt log offered as a path, a forced tool that
stays forced (the branch loops on it), a path enumeration that walks a huge tree on every step, ``none`` that still
lets a tool through, or an unknown choice accepted and silently treated as auto."""

import jsonschema
import pytest

from fs_agent import AgentError, AgentLimits, ReceiptStore, ToolPolicy, Workspace, generate_response, run_agent
from fs_agent.tool_choice import ActionSchemas, schema_for, workspace_paths


def workspace(root, **policy):
    (root / "app.py").write_text("answer = 1\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "util.py").write_text("x = 1\n")
    (root / ".env").write_text("SECRET=1\n")  # protected: no tool may name it
    (root / "logs").mkdir()
    return Workspace(ToolPolicy(root, **policy), confirm_tool=lambda a: True,
                     receipt_store=ReceiptStore(root / "logs" / "receipts.jsonl"))  # fmt: skip


def tools_of(schema):
    return {alt["properties"].get("tool", {}).get("const", "final") for alt in schema["anyOf"]}


def test_paths_and_commands_are_narrowed_to_what_the_workspace_holds(tmp_path):
    ws = workspace(tmp_path, allow_writes=True, allowed_commands=(("python3", "app.py"),))
    (tmp_path / "logs" / "receipts.jsonl").write_text("")
    assert workspace_paths(ws, 100) == (["app.py", "pkg/util.py"], ["logs", "pkg"])
    schema = schema_for(ws, "auto")
    assert tools_of(schema) == {"final", "list_files", "read_file", "write_file", "edit_file", "run_command"}
    ok = [{"tool": "read_file", "path": "pkg/util.py"}, {"tool": "list_files", "path": "logs"},
          {"tool": "edit_file", "path": "app.py", "old": "1", "new": "2"},
          {"tool": "write_file", "path": "new.py", "content": ""},  # write_file creates: its path stays free
          {"tool": "run_command", "argv": ["python3", "app.py"]}]  # fmt: skip
    for action in ok:
        jsonschema.validate(action, schema)
    refused = [{"tool": "read_file", "path": ".env"}, {"tool": "read_file", "path": "logs/receipts.jsonl"},
               {"tool": "read_file", "path": "missing.py"}, {"tool": "list_files", "path": "app.py"},
               {"tool": "edit_file", "path": "new.py", "old": "a", "new": "b"},
               {"tool": "run_command", "argv": ["rm", "-rf", "."]}]  # fmt: skip
    for action in refused:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(action, schema)
    (tmp_path / "new.py").write_text("")  # the next step's schema sees what the last one wrote
    jsonschema.validate({"tool": "read_file", "path": "new.py"}, schema_for(ws, "auto"))


def test_each_tool_choice_allows_exactly_its_actions(tmp_path):
    ws = workspace(tmp_path)
    assert tools_of(schema_for(ws, "none")) == {"final"}
    assert tools_of(schema_for(ws, "required")) == {"list_files", "read_file"}
    assert tools_of(schema_for(ws, "read_file")) == {"read_file"}
    for bad in ("write_file", "rm", "Auto"):  # not enabled (no --allow-writes), no such tool, not a choice
        with pytest.raises(AgentError, match=f"tool choice '{bad}': use auto, required, none or an enabled tool"):
            schema_for(ws, bad)


def test_a_first_step_choice_applies_once_then_the_run_s_choice(tmp_path):
    schemas = ActionSchemas(workspace(tmp_path), "auto", first="read_file")
    assert [tools_of(schemas()) for _ in range(3)] == [{"read_file"}, *[{"final", "list_files", "read_file"}] * 2]
    required = ActionSchemas(schemas.ws, "required", first="none")
    assert [tools_of(required()) for _ in range(3)] == [{"final"}, *[{"list_files", "read_file"}] * 2]


def test_a_big_tree_leaves_paths_free_and_an_empty_one_drops_what_needs_a_file(tmp_path, monkeypatch):
    import fs_agent.tool_choice as tc

    ws = workspace(tmp_path)
    monkeypatch.setattr(tc, "PATH_LIMIT", 2)
    assert tc.workspace_paths(ws, 2) is None and tc.workspace_paths(ws, 4) is not None
    jsonschema.validate({"tool": "read_file", "path": "anything.txt"}, tc.schema_for(ws, "auto"))
    empty = tmp_path / "empty"
    empty.mkdir()
    bare = Workspace(ToolPolicy(empty), confirm_tool=lambda a: True, receipt_store=ReceiptStore(tmp_path / "r"))
    assert tools_of(tc.schema_for(bare, "auto")) == {"final", "list_files"}
    with pytest.raises(AgentError, match="no action is possible"):
        tc.schema_for(bare, "read_file")


def test_the_demo_model_names_only_existing_paths_under_the_schema(tmp_path):
    """Free, the demo model names paths like ')' that do not exist; under the workspace's schema every tool call it
    finishes names a file or directory that is there, and a forced first step is that tool."""
    from fs_generate import load

    model, tok = load(None)
    ws = workspace(tmp_path)
    schemas = ActionSchemas(ws, "required", first="read_file")

    def generate(messages):
        return generate_response(model, tok, messages, model.make_cache, 48, False, schemas)

    run = run_agent("look at the code", generate, ws, AgentLimits(max_steps=3))
    calls = [e.action for e in run.events if e.action is not None]
    assert calls and calls[0].tool == "read_file" and calls[0].arguments["path"] in ("app.py", "pkg/util.py")
    assert all(not e.result.startswith("error: path") for e in run.events if e.result), run.events


def test_run_refuses_a_tool_choice_it_could_not_enforce(tmp_path, capsys):
    """--tool-choice required works through the action schema; with --no-constrain nothing would enforce it, so
    the run is refused before the model loads instead of silently answering freely."""
    from fs_agent.cli import main

    run = ["run", "--root", str(tmp_path), "--tool-choice", "required", "--no-constrain", "x"]
    assert main(run, None, None) == 2
    assert "a tool choice works through the action schema: drop --no-constrain" in capsys.readouterr().err
