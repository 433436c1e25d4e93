"""The next action decoded under the action schema: a response that cannot parse cannot happen.

The demo model, free, answers with prose (every step "response is not valid JSON"); constrained, every response
parses as an action. ``action_schema`` must accept what ``parse_action`` accepts and nothing it refuses on shape.
"""

import json

import jsonschema
import pytest

from fs_agent import AgentLimits, ReceiptStore, ToolPolicy, Workspace, generate_response, parse_action, run_agent
from fs_agent.protocol import TOOL_FIELDS, action_schema

VALID = [
    {"final": "done"},
    {"tool": "list_files"},
    {"tool": "list_files", "path": "."},
    {"tool": "read_file", "path": "app.py"},
    {"tool": "write_file", "path": "a.txt", "content": "x"},
    {"tool": "edit_file", "path": "a.txt", "old": "x", "new": "y"},
    {"tool": "run_command", "argv": ["python", "-V"]},
]
INVALID = [
    {"final": ""},
    {"final": "x", "tool": "read_file"},
    {"tool": "read_file"},
    {"tool": "read_file", "path": "a", "extra": 1},
    {"tool": "run_command", "argv": []},
    {"tool": "run_command", "argv": [""]},
    {"tool": "delete_everything"},
    [],
]


def test_the_schema_accepts_what_parse_action_accepts():
    schema = action_schema()
    for action in VALID:
        jsonschema.validate(action, schema)
        parse_action(json.dumps(action))
    for action in INVALID:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(action, schema)
    only = action_schema({"read_file"})
    jsonschema.validate({"tool": "read_file", "path": "x"}, only)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tool": "write_file", "path": "x", "content": ""}, only)
    assert len(action_schema()["anyOf"]) == 1 + len(TOOL_FIELDS)


BUDGET = 96


def test_the_demo_model_always_answers_with_an_action(tmp_path):
    """Every response the constraint lets finish is an action (a response the budget cuts inside a free-text field
    is unfinished, not invalid); unconstrained, the same model answers with prose."""
    from fs_generate import load

    model, tok = load(None)
    (tmp_path / "app.py").write_text("answer = 1\n")
    ws = Workspace(ToolPolicy(tmp_path), confirm_tool=lambda a: True, receipt_store=ReceiptStore(tmp_path / "r.jsonl"))
    schema = action_schema(ws.available_tools)

    def generate(messages):
        return generate_response(model, tok, messages, model.make_cache, BUDGET, False, schema)

    def cut(response):  # stopped by the token budget inside a free-text field: no constraint can close it in time
        return len(tok.encode(response, add_special_tokens=False)) >= BUDGET - 4

    run = run_agent("set the answer to 2", generate, ws, AgentLimits(max_steps=4))
    finished = [e for e in run.events if not cut(e.response)]
    assert finished and all(e.action is not None for e in finished), [e.response for e in run.events]
    free = run_agent(
        "set the answer to 2", lambda m: generate_response(model, tok, m, model.make_cache, 96), ws, AgentLimits(2)
    )
    assert any(e.action is None for e in free.events)  # what the constraint is for


@pytest.mark.parametrize("name", ["failure-recovery", "localized-constant", "repository-convention"])
def test_fs_agent_eval_on_the_demo_model_never_sees_an_invalid_action(name, tmp_path):
    import io
    import shutil

    from fs_agent.cli import main
    from fs_agent.task_packages import EVALS
    from fs_generate.demo import demo_model_path

    pkg = tmp_path / name
    shutil.copytree(EVALS / name, pkg)
    out = io.StringIO()
    main(["eval", str(pkg), "--model", str(demo_model_path()), "--max-tokens", "96", "--max-steps", "3"], out=out)
    text = out.getvalue()
    steps = text.count("] model> ")
    assert steps >= 1, text
    assert "response is not valid JSON" not in text and "error: " not in text.replace("observation> error: ", "")
    assert text.count("action> ") + text.count('{"final"') >= steps  # every response parsed into an action
