"""``fs-agent run`` (the agent on a task, or up to a checkpoint that ``fork`` resumes) and ``fs-agent eval`` (an
evaluation package graded after the agent ran on it)."""

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from fs_kvcache import save_prompt_cache
from fs_weights.atomic import write_atomic

from . import cli_common as common
from .branching import KvPrefixGenerator
from .checkpoint import save_agent_checkpoint
from .generation import generate_response
from .loop import AgentLimits, run_agent, run_to_checkpoint
from .protocol import AgentError
from .task_packages import grade_package, shipped_eval
from .workspace import ToolPolicy, Workspace


def cmd_run(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    root = Path(args.root)
    ws = common.workspace_for(args, root, stdin, out)
    task = " ".join(args.task)
    if args.model is None:  # the demo model that ships with fs-generate: runs offline on a fresh machine
        from fs_generate.demo import demo_model_path

        args.model = str(demo_model_path())
    model, tok = common.load_for(args)
    print(f"model> {args.model}\nworkspace> {ws.policy.root}\ngoal> {task}", file=out)
    print(f"tools> {', '.join(sorted(ws.available_tools))}", file=out)
    if ws.receipt_store.path is not None:
        print(f"receipt log> {ws.receipt_store.path}", file=out)
    limits = AgentLimits(max_steps=args.max_steps)
    if args.save_run:
        first = _FirstRun(model, tok, args, ws)
        cp = run_to_checkpoint(task, first, ws, args.checkpoint_after, limits, common.print_event(out))
        run_dir = Path(args.save_run)
        run_dir.mkdir(parents=True, exist_ok=True)
        save_agent_checkpoint(cp, run_dir / "checkpoint.json")
        state = first.prefix.prefix_state
        if state is not None and all(isinstance(k, np.ndarray) for k, _ in state[1]):
            identity = common.prefix_identity(cp.checkpoint_id, model, tok, args)
            save_prompt_cache(run_dir / "prefix.safetensors", list(state[0]), list(state[1]), identity)
        meta = {"root": str(ws.policy.root), "model": args.model, "receipt_log": args.receipt_log}
        meta |= common.load_flags(args)  # fork loads the model the same way
        write_atomic(run_dir / "run.json", json.dumps(meta, indent=2) + "\n")
        print(f"checkpoint> {cp.checkpoint_id} saved in {run_dir}", file=out)
        return 0
    schema = common.action_schemas(args, ws)
    run = run_agent(
        task,
        lambda m: generate_response(
            model, tok, m, lambda: model.make_cache(), args.max_tokens, args.enable_thinking, schema, args.lookup
        ),
        ws,
        limits,
        on_event=common.print_event(out),
    )
    print(f"finished> {run.final}" if run.completed else f"stopped> {run.reason}", file=out)
    print(f"file-tool changes> {json.dumps(list(ws.modified_files))}", file=out)
    return 0 if run.completed else 1


class _FirstRun:
    """The pre-checkpoint run: plain generation plus a KV prefix saved at the checkpoint."""

    def __init__(self, model: Any, tok: Any, args: argparse.Namespace, ws: Workspace):
        self.model, self.tok, self.args = model, tok, args
        self.schema = common.action_schemas(args, ws)
        self.prefix = KvPrefixGenerator(model, tok, args.max_tokens, args.enable_thinking, None, args.lookup)

    def __call__(self, messages: list[dict[str, str]]) -> str:
        return generate_response(
            self.model,
            self.tok,
            messages,
            lambda: self.model.make_cache(),
            self.args.max_tokens,
            self.args.enable_thinking,
            self.schema,
            self.args.lookup,
        )

    def save_checkpoint(self, messages: list[dict[str, str]]) -> Any:
        return self.prefix.save_checkpoint(messages)


def cmd_eval(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    agent = None
    if args.baseline and args.model:
        raise AgentError("--baseline grades the untouched workspace: it runs no model, so drop --model")
    if not args.baseline:  # without --model: fs-generate's demo model, as `run` does
        model, tok = common.load_for(args)

        def agent(root: Path, prompt: str, max_steps: int) -> None:
            ws = Workspace(ToolPolicy(root, allow_writes=True), confirm_tool=lambda a: True)
            schema = common.action_schemas(args, ws)
            run_agent(
                prompt,
                lambda m: generate_response(
                    model, tok, m, lambda: model.make_cache(), args.max_tokens, False, schema, args.lookup
                ),
                ws,
                AgentLimits(max_steps=max_steps),
                on_event=common.print_event(out),
            )

    shipped = None if Path(args.package).exists() else shipped_eval(args.package)
    with tempfile.TemporaryDirectory(prefix="fs-agent-eval-") as tmp:
        # a copy: an installer may hard-link the wheel's files (uv does), and a package must hold none
        package = shutil.copytree(shipped, Path(tmp) / args.package) if shipped else Path(args.package)
        result = grade_package(package, agent)
    print(json.dumps(result, indent=2, sort_keys=True), file=out)
    return 0 if result["status"] == "passed" else 1
