"""``fs-agent run | fork | eval``: the agent on a real model, with an operator at the approval prompt."""

import argparse
import json
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

import numpy as np

from fs_generate import GenerateError
from fs_kvcache import KVCacheError, identity_string, load_prompt_cache, save_prompt_cache
from fs_model import ModelError
from fs_tokenizer import TokenizerError
from fs_weights import WeightsError
from fs_weights.atomic import write_atomic
from fs_weights.command_line import non_negative_int, positive_int, run_main
from fs_weights.jsonfile import read_json

from . import __version__
from .branching import KvPrefixGenerator, run_branch, select_branch
from .checkpoint import load_agent_checkpoint, save_agent_checkpoint
from .confined import STATE_DIR
from .evaluation import EvaluationCase, FileExpectation, ReceiptExpectation, ResultExpectation
from .generation import PROMPT_LOOKUP, generate_response
from .loop import AgentEvent, AgentLimits, run_agent, run_to_checkpoint
from .protocol import AgentError, ToolAction, action_json, action_schema
from .receipts import ReceiptStore, repair_log
from .task_packages import EVALS, PackageError, grade_package, shipped_eval
from .workspace import ApprovalDecision, ToolPolicy, Workspace, tools_for

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


DEFAULT_RECEIPT_LOG = f"{STATE_DIR}/receipts.jsonl"  # inside the root, under the name no tool can reach
BRANCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
BRANCH_MARK = f"{STATE_DIR}/branch"  # written into every branch directory fs creates; --overwrite requires it


def _workspace(args: argparse.Namespace, root: Path, stdin: TextIO, out: TextIO) -> Workspace:
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
    return Workspace(policy, confirm_tool=ask(stdin, out), receipt_store=ReceiptStore(log))


def _action_schema(args: argparse.Namespace, allow_writes: bool | None = None) -> Any:
    """The JSON schema every action is decoded under (the tools this run's policy offers), None with
    ``--no-constrain``: the one place run, fork and eval decide it."""
    required = getattr(args, "tool_choice", "auto") == "required"
    if args.no_constrain:
        if required:
            raise AgentError("--tool-choice required works through the action schema: drop --no-constrain")
        return None
    writes = args.allow_writes if allow_writes is None else allow_writes
    return action_schema(tools_for(writes, bool(getattr(args, "allow_command", ()))), final=not required)


def _prefix_identity(checkpoint_id: str, model: Any, tok: Any) -> str:
    """What a saved prefix is only valid for: this checkpoint, these weights, this tokenizer."""
    return identity_string(
        checkpoint=checkpoint_id,
        weights=getattr(model, "weights_digest", ""),
        tokenizer=getattr(tok, "digest", ""),
    )


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    from fs_generate import load
    from fs_model.cpu import set_threads

    set_threads(args.threads)
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
    if args.model is None:  # the demo model that ships with fs-generate: runs offline on a fresh machine
        from fs_generate.demo import demo_model_path

        args.model = str(demo_model_path())
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
            identity = _prefix_identity(cp.checkpoint_id, model, tok)
            save_prompt_cache(run_dir / "prefix.safetensors", list(state[0]), list(state[1]), identity)
        meta = {"root": str(ws.policy.root), "model": args.model, "receipt_log": args.receipt_log}
        write_atomic(run_dir / "run.json", json.dumps(meta, indent=2) + "\n")
        print(f"checkpoint> {cp.checkpoint_id} saved in {run_dir}", file=out)
        return 0
    schema = _action_schema(args)
    run = run_agent(
        task,
        lambda m: generate_response(
            model, tok, m, lambda: model.make_cache(), args.max_tokens, args.enable_thinking, schema, args.lookup
        ),
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
        self.schema = _action_schema(args)
        self.prefix = KvPrefixGenerator(model, tok, args.max_tokens, args.enable_thinking, self.schema, args.lookup)

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


CASE_FIELDS: dict[str, tuple[type, set[str], set[str]]] = {  # list key -> (class, required, optional fields)
    "files": (FileExpectation, {"path", "content"}, set()),
    "results": (ResultExpectation, {"tool", "contains"}, set()),
    "receipts": (ReceiptExpectation, {"tool_call_id", "tool", "exit_state", "result_contains"}, {"changed_artifacts"}),
}


def _case(path: str) -> EvaluationCase:
    """An evaluation case file, every key and type checked (errors name the file and the key)."""
    d = read_json(path, AgentError)
    if not isinstance(d, dict) or not isinstance(d.get("final_contains"), str):
        raise AgentError(f"{path}: must be an object with a string 'final_contains'")
    unknown = set(d) - {"final_contains", *CASE_FIELDS}
    if unknown:
        raise AgentError(f"{path}: unknown keys {sorted(unknown)}")
    parts: dict[str, tuple[Any, ...]] = {}
    for key, (cls, required, optional) in CASE_FIELDS.items():
        items = d.get(key, [])
        if not isinstance(items, list):
            raise AgentError(f"{path}: {key!r} must be a list")
        built = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not required <= set(item) <= required | optional:
                want = ", ".join(sorted(required)) + (f" (optional {', '.join(sorted(optional))})" if optional else "")
                raise AgentError(f"{path}: {key}[{i}] must be an object with keys {want}, got {item!r:.80}")
            if "changed_artifacts" in item:
                if not isinstance(item["changed_artifacts"], list):
                    raise AgentError(f"{path}: {key}[{i}].changed_artifacts must be a list")
                item = {**item, "changed_artifacts": tuple(item["changed_artifacts"])}
            try:
                built.append(cls(**item))
            except (ValueError, TypeError) as e:
                raise AgentError(f"{path}: {key}[{i}]: {e}") from None
        parts[key] = tuple(built)
    return EvaluationCase(d["final_contains"], parts["files"], parts["results"], parts["receipts"])


def _run_meta(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    d = read_json(path, AgentError)
    ok = isinstance(d, dict) and isinstance(d.get("root"), str) and isinstance(d.get("model"), str)
    if not ok or not isinstance(d.get("receipt_log"), str | None):
        raise AgentError(f"{path}: must be an object with string 'root' and 'model' (and 'receipt_log' or null)")
    return d


def _branch_dir(run_dir: Path, name: str, overwrite: bool) -> Path:
    """A fresh directory for branch ``name`` inside ``run_dir/branches``; an existing one only with ``overwrite``, and
    only if fs made it (its mark is there) - never a path outside ``branches/``."""
    check_branch_name(name)
    branches = run_dir / "branches"
    if branches.is_symlink() or (branches.exists() and not branches.is_dir()):
        raise AgentError(f"{branches} is not a directory fs created")
    branches.mkdir(exist_ok=True)
    bdir = branches / name
    if bdir.is_symlink() or bdir.exists():
        mark = bdir / BRANCH_MARK
        if not overwrite:
            raise AgentError(f"branch {name!r} already exists ({bdir}); pass --overwrite to replace it")
        if bdir.is_symlink() or not bdir.is_dir() or mark.is_symlink() or not mark.is_file():
            raise AgentError(f"{bdir} was not created by fs-agent fork (no {BRANCH_MARK}); refusing to remove it")
        shutil.rmtree(bdir)
    return bdir


def check_branch_name(name: str) -> None:
    if not BRANCH_NAME.fullmatch(name):  # no separator, not empty, not "." or "..": a name, never a path
        raise AgentError(
            f"branch name {name!r} must be 1-64 letters, digits, '_', '.', '-', starting with a letter or digit"
        )


def cmd_fork(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    run_dir = Path(args.run_dir)
    meta = _run_meta(run_dir)
    cp = load_agent_checkpoint(run_dir / "checkpoint.json")
    case = _case(args.case)
    specs = [spec.partition("=") for spec in args.branch]
    for name, _, _ in specs:  # every name checked before any model is loaded or directory touched
        check_branch_name(name)
    args.model = args.model or meta["model"]
    model, tok = _load(args)
    base = KvPrefixGenerator(model, tok, args.max_tokens, args.enable_thinking, _action_schema(args), args.lookup)
    if (run_dir / "prefix.safetensors").exists() and args.backend == "numpy":
        identity = _prefix_identity(cp.checkpoint_id, model, tok)
        tokens, kv, _ = load_prompt_cache(run_dir / "prefix.safetensors", identity)
        if tuple(tokens) != cp.model.cached_token_ids:
            raise AgentError("prefix.safetensors does not hold the checkpoint's tokens")
        base.adopt_prefix(cp.model, kv)
        print(f"prefix> loaded {len(tokens)} cached tokens from prefix.safetensors (no prefill)", file=out)
    elif base.save_checkpoint(cp.message_dicts()) != cp.model:
        raise AgentError("the saved checkpoint's tokens do not match this model and tokenizer")
    outcomes = []
    for name, _, steering in specs:
        bdir = _branch_dir(run_dir, name, args.overwrite)
        shutil.copytree(meta["root"], bdir, symlinks=True)
        (bdir / STATE_DIR).mkdir(mode=0o700, exist_ok=True)
        (bdir / BRANCH_MARK).write_text(name + "\n")
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
    if args.baseline and args.model:
        raise AgentError("--baseline grades the untouched workspace: it runs no model, so drop --model")
    if not args.baseline:  # without --model: fs-generate's demo model, as `run` does
        model, tok = _load(args)

        schema = _action_schema(args, allow_writes=True)

        def agent(root: Path, prompt: str, max_steps: int) -> None:
            ws = Workspace(ToolPolicy(root, allow_writes=True), confirm_tool=lambda a: True)
            run_agent(
                prompt,
                lambda m: generate_response(
                    model, tok, m, lambda: model.make_cache(), args.max_tokens, False, schema, args.lookup
                ),
                ws,
                AgentLimits(max_steps=max_steps),
                on_event=_print_event(out),
            )

    shipped = None if Path(args.package).exists() else shipped_eval(args.package)
    with tempfile.TemporaryDirectory(prefix="fs-agent-eval-") as tmp:
        # a copy: an installer may hard-link the wheel's files (uv does), and a package must hold none
        package = shutil.copytree(shipped, Path(tmp) / args.package) if shipped else Path(args.package)
        result = grade_package(package, agent)
    print(json.dumps(result, indent=2, sort_keys=True), file=out)
    return 0 if result["status"] == "passed" else 1


CASE_FORMAT = """\
--case FILE: a JSON object; a branch passes when every expectation holds:
  {"final_contains": "answer = 2",                          the final message contains this text (required)
   "files": [{"path": "app.py", "content": "..."}],         a workspace file's exact content afterwards
   "results": [{"tool": "run", "contains": "passed"}],      some tool result of that tool contains this text
   "receipts": [{"tool_call_id": "call-2", "tool": "run", "exit_state": "ok" or "error", "result_contains": "passed",
                 "changed_artifacts": []}]}                 a receipt with these fields (changed_artifacts optional)
  Unknown keys, wrong types and missing fields are refused with the file and the key."""
SUBCOMMANDS = {  # name -> (what it does, the epilog of its --help)
    "run": (
        "run the agent on a task in a workspace directory (--root); with --save-run, stop at a tool boundary and "
        "save a checkpoint that fork resumes from",
        "tools: list and read always; write/edit with --allow-writes; run for each exact --allow-command line.\n"
        "without --model: fs-generate's demo model.",
    ),
    "fork": (
        "resume a saved run as several steered branches that share one cached prefix, grade each against a case, "
        "and keep the one --select names",
        CASE_FORMAT,
    ),
    "eval": (
        "grade an evaluation package (a task, a workspace, held-out tests) after the agent ran on it; with "
        "--baseline, the untouched workspace (which must fail)",
        "prints one JSON object; exit 0 when the package passed, 1 when it did not.",
    ),
}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fs-agent", description="A tool-using agent on a Qwen3 model.")
    ap.add_argument("--version", action="version", version=f"fs-agent {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "fork", "eval"):
        what, more = SUBCOMMANDS[name]
        p = sub.add_parser(
            name, help=what, description=what, epilog=more, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        p.add_argument("--backend", choices=["numpy", "mlx"], default="numpy")
        p.add_argument("--threads", type=positive_int, help="cap the CPU kernels' threads (default: every core)")
        p.add_argument("--max-tokens", type=positive_int, default=256)
        p.add_argument("--max-steps", type=positive_int, default=8)
        p.add_argument("--enable-thinking", action="store_true")
        p.add_argument(
            "--prompt-lookup-num-tokens",
            dest="lookup",
            type=non_negative_int,
            default=PROMPT_LOOKUP,
            help=f"drafts per pass copied from the context (default {PROMPT_LOOKUP}; 0: off). Lossless: the same "
            "tokens as without; used only on batch-invariant models (bf16 / int8 / int4 on the CPU kernels)",
        )
        p.add_argument(
            "--no-constrain",
            action="store_true",
            help="decode actions freely (default: under the action schema, so every response parses)",
        )
        if name in ("run", "fork"):
            p.add_argument("--allow-writes", action="store_true")
            p.add_argument("--allow-command", action="append", default=[], help="an exact command line (shlex)")
            p.add_argument(
                "--receipt-log",
                help=f"workspace-relative path of the receipt log (default {DEFAULT_RECEIPT_LOG}); "
                "no tool can read or write it",
            )
            p.add_argument(
                "--pass-env",
                action="append",
                default=[],
                metavar="NAME",
                help="let commands see this environment variable (they get only PATH, HOME=root, LANG otherwise)",
            )
    run, fork, ev = sub.choices["run"], sub.choices["fork"], sub.choices["eval"]
    run.add_argument("--root", required=True)
    run.add_argument("--model", help="model directory or Hugging Face id (default: fs-generate's demo model)")
    run.add_argument("--save-run", help="stop at a tool boundary and save checkpoint.json + run.json here")
    run.add_argument("--checkpoint-after", type=positive_int, default=1, help="tool calls before the checkpoint")
    run.add_argument(
        "--tool-choice",
        choices=["auto", "required"],
        default="auto",
        help="OpenAI's: required = every step calls a tool, never a final answer (so a model that would answer at "
        "once still reaches --save-run's checkpoint; fork's branches may answer)",
    )
    run.add_argument("task", nargs="+", help="the task, in words")
    fork.add_argument("run_dir", help="the directory `fs-agent run --save-run` wrote")
    fork.add_argument("--model", help="the model (default: the one the saved run used)")
    fork.add_argument("--branch", action="append", required=True, help="NAME=steering text (repeatable)")
    fork.add_argument("--case", required=True, help="evaluation case JSON (format below)")
    fork.add_argument("--select", help="the branch to select (must pass)")
    fork.add_argument("--overwrite", action="store_true", help="replace branch directories an earlier fork created")
    ev.add_argument(
        "package",
        help="evaluation package directory (task.json, workspace/, held_out_tests/), or the name of a shipped one: "
        + ", ".join(sorted(p.name for p in EVALS.iterdir() if (p / "task.json").is_file())),
    )
    ev.add_argument("--model", help="run the agent with this model (default: fs-generate's demo model, as run)")
    ev.add_argument("--baseline", action="store_true", help="grade the untouched workspace (no model; it must fail)")
    rc = sub.add_parser("receipts", help="verify a receipt log, or drop its torn last line")
    rc.add_argument("action", choices=["verify", "repair"])
    rc.add_argument("log", help="path of the receipt log")
    return ap


def cmd_receipts(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    log = Path(args.log)
    if args.action == "repair":
        print(f"receipts> dropped {repair_log(log)} bytes of a torn last line", file=out)
    store = ReceiptStore(log)
    print(f"receipts> {log}: {len(store.all())} receipts, chain and anchor verified", file=out)
    return 0


KNOWN_ERRORS = (
    AgentError,
    PackageError,
    GenerateError,
    KVCacheError,
    ModelError,
    TokenizerError,
    WeightsError,
    OSError,
)
COMMANDS = {"run": cmd_run, "fork": cmd_fork, "eval": cmd_eval, "receipts": cmd_receipts}


def main(argv: list[str] | None = None, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    args = parser().parse_args(argv)
    stdin, out = stdin or sys.stdin, out or sys.stdout
    return run_main("fs-agent", lambda: COMMANDS[args.cmd](args, stdin, out), KNOWN_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
