"""``fs-agent run | fork | eval``: the agent on a real model, with an operator at the approval prompt."""

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

import numpy as np

from fs_kvcache import load_prompt_cache, save_prompt_cache

from .branching import KvPrefixGenerator, run_branch, select_branch
from .checkpoint import load_agent_checkpoint, save_agent_checkpoint
from .evaluation import EvaluationCase, FileExpectation, ReceiptExpectation, ResultExpectation
from .generation import generate_response
from .loop import AgentEvent, AgentLimits, run_agent, run_to_checkpoint
from .protocol import AgentError, ToolAction, action_json
from .receipts import ReceiptStore
from .task_packages import PackageError, grade_package
from .workspace import ApprovalDecision, ToolPolicy, Workspace

COMMAND_WARNINGS = (
    "warning: commands are not confined by the workspace boundary",
    "warning: approved commands may create or change additional filesystem paths; command receipts record the "
    "command and result, not a complete filesystem diff",
)


def ask(stdin: TextIO, out: TextIO) -> Any:
    """The interactive approval: non-TTY or EOF denies, y/yes approves, anything else is a denial with a reason."""

    def confirm(action: ToolAction) -> Any:
        print(f"approval requested> {action_json(action)}", file=out)
        if action.tool == "run_command":
            for w in COMMAND_WARNINGS:
                print(w, file=out)
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


def _workspace(args: argparse.Namespace, root: Path, stdin: TextIO, out: TextIO) -> Workspace:
    commands = tuple(tuple(shlex.split(c)) for c in args.allow_command)
    policy = ToolPolicy(root, allow_writes=args.allow_writes, allowed_commands=commands)
    log = None
    if args.receipt_log:
        rel = PurePosixPath(args.receipt_log)
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError("--receipt-log must be a workspace-relative path without '..'")
        log = root / rel
        if not log.parent.is_dir():
            raise ValueError(f"--receipt-log: parent directory {log.parent} does not exist")
    return Workspace(policy, confirm_tool=ask(stdin, out), receipt_store=ReceiptStore(log))


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    from fs_generate import load

    return load(args.model, backend=args.backend)


def _print_event(out: TextIO) -> Any:
    def show(e: AgentEvent) -> None:
        print(f"[{e.step}] model> {e.response}", file=out)
        if isinstance(e.action, ToolAction):
            print(f"action> {action_json(e.action)}", file=out)
        if e.result is not None:
            print(f"observation> {e.result}", file=out)

    return show


def cmd_run(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    root = Path(args.root)
    ws = _workspace(args, root, stdin, out)
    task = " ".join(args.task)
    model, tok = _load(args)
    print(f"model> {args.model}\nworkspace> {ws.policy.root}\ngoal> {task}", file=out)
    print(f"tools> {', '.join(sorted(ws.available_tools))}", file=out)
    if ws.receipt_store.path is not None:
        print(f"receipt log> {ws.receipt_store.path}", file=out)
    limits = AgentLimits(max_steps=args.max_steps)
    if args.save_run:
        first = _FirstRun(model, tok, args)
        cp = run_to_checkpoint(task, first, ws, args.checkpoint_after, limits)
        run_dir = Path(args.save_run)
        run_dir.mkdir(parents=True, exist_ok=True)
        save_agent_checkpoint(cp, run_dir / "checkpoint.json")
        state = first.prefix.prefix_state
        if state is not None and all(isinstance(k, np.ndarray) for k, _ in state[1]):
            save_prompt_cache(run_dir / "prefix.safetensors", list(state[0]), list(state[1]), cp.checkpoint_id)
        (run_dir / "run.json").write_text(
            json.dumps({"root": str(ws.policy.root), "model": args.model, "receipt_log": args.receipt_log}, indent=2)
            + "\n"
        )
        print(f"checkpoint> {cp.checkpoint_id} saved in {run_dir}", file=out)
        return 0
    run = run_agent(
        task,
        lambda m: generate_response(model, tok, m, lambda: model.make_cache(), args.max_tokens, args.enable_thinking),
        ws,
        limits,
        on_event=_print_event(out),
    )
    print(f"finished> {run.final}" if run.completed else f"stopped> {run.reason}", file=out)
    print(f"file-tool changes> {json.dumps(list(ws.modified_files))}", file=out)
    return 0 if run.completed else 1


class _FirstRun:
    """The pre-checkpoint run: plain generation plus a KV prefix saved at the checkpoint."""

    def __init__(self, model: Any, tok: Any, args: argparse.Namespace):
        self.model, self.tok, self.args = model, tok, args
        self.prefix = KvPrefixGenerator(model, tok, args.max_tokens, args.enable_thinking)

    def __call__(self, messages: list[dict[str, str]]) -> str:
        return generate_response(
            self.model,
            self.tok,
            messages,
            lambda: self.model.make_cache(),
            self.args.max_tokens,
            self.args.enable_thinking,
        )

    def save_checkpoint(self, messages: list[dict[str, str]]) -> Any:
        return self.prefix.save_checkpoint(messages)


def _case(path: str) -> EvaluationCase:
    d = json.loads(Path(path).read_text(encoding="utf-8"))
    return EvaluationCase(
        d["final_contains"],
        tuple(FileExpectation(**f) for f in d.get("files", [])),
        tuple(ResultExpectation(**r) for r in d.get("results", [])),
        tuple(
            ReceiptExpectation(**{**r, "changed_artifacts": tuple(r.get("changed_artifacts", ()))})
            for r in d.get("receipts", [])
        ),
    )


def cmd_fork(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    run_dir = Path(args.run_dir)
    meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    cp = load_agent_checkpoint(run_dir / "checkpoint.json")
    args.model = args.model or meta["model"]
    model, tok = _load(args)
    base = KvPrefixGenerator(model, tok, args.max_tokens, args.enable_thinking)
    if (run_dir / "prefix.safetensors").exists() and args.backend == "numpy":
        tokens, kv, _ = load_prompt_cache(run_dir / "prefix.safetensors", cp.checkpoint_id)
        if tuple(tokens) != cp.model.cached_token_ids:
            raise AgentError("prefix.safetensors does not hold the checkpoint's tokens")
        base.adopt_prefix(cp.model, kv)
        print(f"prefix> loaded {len(tokens)} cached tokens from prefix.safetensors (no prefill)", file=out)
    elif base.save_checkpoint(cp.message_dicts()) != cp.model:
        raise AgentError("the saved checkpoint's tokens do not match this model and tokenizer")
    case = _case(args.case)
    outcomes = []
    for spec in args.branch:
        name, _, steering = spec.partition("=")
        bdir = run_dir / "branches" / name
        if bdir.exists():
            shutil.rmtree(bdir)
        shutil.copytree(meta["root"], bdir)
        args.receipt_log = args.receipt_log or meta["receipt_log"]
        ws = _workspace(args, bdir, stdin, out)
        outcome = run_branch(
            name,
            steering,
            cp,
            base.fork(),
            ws,
            ReceiptStore(ws.receipt_store.path),
            case,
            AgentLimits(max_steps=args.max_steps),
        )
        r = outcome.reuse
        print(
            f"branch> {name}: reused {r.reused_tokens} prefix tokens (layer offsets {r.layer_offsets[:1]}...), "
            f"avoided prefill of {r.avoided_prefill_tokens}",
            file=out,
        )
        print(outcome.report.render(), file=out)
        outcomes.append(outcome)
    if args.select:
        chosen = select_branch(outcomes, args.select)
        print(f"selected> {chosen.name} ({run_dir / 'branches' / chosen.name})", file=out)
    return 0


def cmd_eval(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    agent = None
    if args.model:
        model, tok = _load(args)

        def agent(root: Path, prompt: str, max_steps: int) -> None:
            ws = Workspace(ToolPolicy(root, allow_writes=True), confirm_tool=lambda a: True)
            run_agent(
                prompt,
                lambda m: generate_response(model, tok, m, lambda: model.make_cache(), args.max_tokens),
                ws,
                AgentLimits(max_steps=max_steps),
                on_event=_print_event(out),
            )

    result = grade_package(args.package, agent)
    print(json.dumps(result, indent=2, sort_keys=True), file=out)
    return 0 if result["status"] == "passed" else 1


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fs-agent", description="A tool-using agent on a Qwen3 model.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "fork", "eval"):
        p = sub.add_parser(name)
        p.add_argument("--backend", choices=["numpy", "mlx"], default="numpy")
        p.add_argument("--max-tokens", type=int, default=256)
        p.add_argument("--max-steps", type=int, default=8)
        p.add_argument("--enable-thinking", action="store_true")
        if name in ("run", "fork"):
            p.add_argument("--allow-writes", action="store_true")
            p.add_argument("--allow-command", action="append", default=[], help="an exact command line (shlex)")
            p.add_argument("--receipt-log", help="workspace-relative path of the receipts.jsonl log")
    run, fork, ev = sub.choices["run"], sub.choices["fork"], sub.choices["eval"]
    run.add_argument("--root", required=True)
    run.add_argument("--model", required=True, help="model directory or Hugging Face id")
    run.add_argument("--save-run", help="stop at a tool boundary and save checkpoint.json + run.json here")
    run.add_argument("--checkpoint-after", type=int, default=1, help="tool calls before the checkpoint")
    run.add_argument("task", nargs="+")
    fork.add_argument("run_dir")
    fork.add_argument("--model")
    fork.add_argument("--branch", action="append", required=True, help="NAME=steering text (repeatable)")
    fork.add_argument("--case", required=True, help="evaluation case JSON (final_contains, files, results, receipts)")
    fork.add_argument("--select", help="the branch to select (must pass)")
    ev.add_argument("package", help="evaluation package directory (task.json, workspace/, held_out_tests/)")
    ev.add_argument("--model", help="run the agent with this model; without it, grade the untouched baseline")
    return ap


def main(argv: list[str] | None = None, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    args = parser().parse_args(argv)
    stdin, out = stdin or sys.stdin, out or sys.stdout
    try:
        return {"run": cmd_run, "fork": cmd_fork, "eval": cmd_eval}[args.cmd](args, stdin, out)
    except PackageError as e:
        print(f"fs-agent: invalid package: {e}", file=sys.stderr)
        return 2
    except (AgentError, ValueError, OSError) as e:
        print(f"fs-agent: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
