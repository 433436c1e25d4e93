"""What the next response may be, as the JSON schema it is decoded under: OpenAI's ``tool_choice`` (``auto``,
``required``, ``none`` or one tool by name) over the tools the workspace's policy offers, with every path and command
narrowed to what the workspace holds at that step - a constrained model cannot name a file that is not there, nor a
command the policy would refuse."""

from collections.abc import Iterable

from .protocol import AgentError, action_schema
from .workspace import Workspace

CHOICES = ("auto", "required", "none")
PATH_LIMIT = 1000  # past this many paths they stay free strings: a grammar over a big tree costs more than it saves


def check_tool_choice(choice: str, tools: Iterable[str]) -> str:
    """``choice`` if it is one of ``CHOICES`` or an enabled tool; otherwise an error naming what is possible."""
    tools = sorted(tools)
    if choice in CHOICES or choice in tools:
        return choice
    raise AgentError(f"tool choice {choice!r}: use {', '.join(CHOICES)} or an enabled tool ({', '.join(tools)})")


def workspace_paths(ws: Workspace, limit: int) -> tuple[list[str], list[str]] | None:
    """(files, dirs) that ``list_files`` can reach from the root, breadth first; None past ``limit`` paths."""
    files: list[str] = []
    dirs: list[str] = []
    todo = ["."]
    while todo:
        try:
            shown = ws.entries(todo.pop(0))
        except (AgentError, OSError):  # removed or unreadable meanwhile: it names nothing
            continue
        for kind, path in shown:
            (files if kind == "file" else dirs).append(path)
            if kind == "dir":
                todo.append(path)
        if len(files) + len(dirs) > limit:
            return None
    return files, dirs


def schema_for(ws: Workspace, choice: str) -> dict:
    """The schema of one response under ``choice``, built from the workspace as it is now."""
    tools = ws.available_tools
    check_tool_choice(choice, tools)
    if choice == "none":  # a final answer only
        return action_schema(set())
    paths = workspace_paths(ws, PATH_LIMIT)
    files, dirs = paths if paths is not None else (None, None)
    only = {choice} if choice in tools else tools
    commands = ws.policy.allowed_commands
    return action_schema(only, final=choice == "auto", files=files, dirs=dirs, commands=commands)


class ActionSchemas:
    """The schema of each next response, built when it is asked for: ``first`` for the next one only (a branch's
    steered step), ``choice`` for every one after. A forced tool applies once, as OpenAI's Agents SDK resets
    ``tool_choice`` after a call: forced every step, a tool call could only repeat until the loop stops it."""

    def __init__(self, ws: Workspace, choice: str = "auto", first: str | None = None):
        self.ws, self.choice = ws, check_tool_choice(choice, ws.available_tools)
        self.first = None if first is None else check_tool_choice(first, ws.available_tools)

    def __call__(self) -> dict:
        choice, self.first = self.first or self.choice, None
        return schema_for(self.ws, choice)
