"""What every ``fs-agent`` subcommand sets up the same way: the operator's approval prompt, the workspace and its
receipt log, the action schema, the model, and how events are printed (decided here once for run, fork and eval)."""

import argparse
import shlex
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from fs_kvcache import identity_string

from .confined import STATE_DIR
from .loop import AgentEvent
from .protocol import AgentError, ToolAction, action_json
from .receipts import ReceiptStore
from .tool_choice import ActionSchemas
from .workspace import ApprovalDecision, ToolPolicy, Workspace

COMMAND_WARNINGS = (
    "warning: commands are not confined by the workspace boundary",
    "warning: approved commands may create or change additional filesystem paths; command receipts record the "
    "command and result, not a complete filesystem diff",
)


def ask(stdin: TextIO, out: TextIO, yes: bool = False) -> Any:
    """The interactive approval: non-TTY or EOF denies, y/yes approves, anything else is a denial with a reason.
    ``yes`` (``--yes``) approves every action the policy allows without asking; the policy still decides what that
    is (writes only with --allow-writes, commands only the exact --allow-command lines)."""

    def confirm(action: ToolAction) -> Any:
        print(f"approval requested> {action_json(action)}", file=out)
        if action.tool == "run_command":
            for w in COMMAND_WARNINGS:
                print(w, file=out)
        if yes:
            print("approval> approved (--yes)", file=out)
            return True
        if not stdin.isatty():
            print("approval> denied (standard input is not a terminal)", file=out)
            return False
        print("approve? [y/N] (or type a reason to deny) ", end="", file=out, flush=True)
        line = stdin.readline()
        if not line:
            return False
        answer = line.strip()
        if answer.casefold() in ("y", "yes"):
            return True
        return ApprovalDecision(False, answer) if answer and answer.casefold() not in ("n", "no") else False

    return confirm


DEFAULT_RECEIPT_LOG = f"{STATE_DIR}/receipts.jsonl"  # inside the root, under the name no tool can reach


def workspace_for(args: argparse.Namespace, root: Path, stdin: TextIO, out: TextIO) -> Workspace:
    try:
        commands = tuple(tuple(shlex.split(c)) for c in args.allow_command)
    except ValueError as e:
        raise AgentError(f"--allow-command: {e}") from None
    try:
        policy = ToolPolicy(
            root, allow_writes=args.allow_writes, allowed_commands=commands, pass_env=tuple(args.pass_env)
        )
    except ValueError as e:
        raise AgentError(f"--root {root}: {e}") from None
    rel = PurePosixPath(args.receipt_log or DEFAULT_RECEIPT_LOG)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise AgentError("--receipt-log must be a workspace-relative path without '..'")
    log = policy.root / rel
    if str(rel) == DEFAULT_RECEIPT_LOG:
        log.parent.mkdir(mode=0o700, exist_ok=True)
    if not log.parent.is_dir() or log.parent.is_symlink():
        raise AgentError(f"--receipt-log: parent directory {log.parent} does not exist")
    return Workspace(policy, confirm_tool=ask(stdin, out, getattr(args, "yes", False)), receipt_store=ReceiptStore(log))


def action_schemas(args: argparse.Namespace, ws: Workspace, first: str | None = None) -> Any:
    """What each response is decoded under (``tool_choice.ActionSchemas``: the tools ``ws`` offers, its paths and
    commands; ``first`` for the next response only), or None with ``--no-constrain``: the one place run, fork and
    eval decide it."""
    choice = getattr(args, "tool_choice", "auto")
    check_constrained(args, first)
    return None if args.no_constrain else ActionSchemas(ws, choice, first)


def check_constrained(args: argparse.Namespace, *choices: str | None) -> None:
    """A tool choice other than auto is enforced through the action schema: refused with ``--no-constrain``."""
    if args.no_constrain and any(c not in (None, "auto") for c in (getattr(args, "tool_choice", "auto"), *choices)):
        raise AgentError("a tool choice works through the action schema: drop --no-constrain")


def prefix_identity(checkpoint_id: str, model: Any, tok: Any, args: argparse.Namespace) -> str:
    """What a saved prefix is only valid for: this checkpoint, these weights (an adapter's digest included) loaded
    the same way (the K/V an int4 copy computed are not the bf16 model's), this tokenizer."""
    flags = load_flags(args)
    return identity_string(
        checkpoint=checkpoint_id,
        weights=getattr(model, "weights_digest", ""),
        loaded=f"dtype={flags['dtype']} quantize={flags['quantize']}",
        tokenizer=getattr(tok, "digest", ""),
    )


def load_for(args: argparse.Namespace) -> tuple[Any, Any]:
    from fs_generate import load
    from fs_model.cpu import set_threads

    set_threads(args.threads)
    return load(args.model, backend=args.backend, **load_flags(args))


LOAD_FLAGS = ("dtype", "quantize", "adapter_path")  # how the weights are loaded; a saved run records them


def load_flags(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k, None) for k in LOAD_FLAGS}


def print_event(out: TextIO) -> Any:
    def show(e: AgentEvent) -> None:
        print(f"[{e.step}] model> {e.response}", file=out)
        if isinstance(e.action, ToolAction):
            print(f"action> {action_json(e.action)}", file=out)
        if e.result is not None:
            print(f"observation> {e.result}", file=out)

    return show
