"""``fs-agent fork``: a saved run resumed as several steered branches that share one cached prefix, each graded
against an evaluation case (``--case``: its format is ``CASE_FORMAT``), the one ``--select`` names kept."""

import argparse
import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from fs_kvcache import load_prompt_cache
from fs_weights.atomic import write_atomic
from fs_weights.jsonfile import read_json

from . import cli_common as common
from .branching import KvPrefixGenerator, run_branch, select_branch
from .checkpoint import load_agent_checkpoint
from .confined import STATE_DIR
from .evaluation import EvaluationCase, FileExpectation, ReceiptExpectation, ResultExpectation
from .loop import AgentLimits
from .protocol import AgentError
from .receipts import ReceiptStore
from .tool_choice import check_tool_choice
from .workspace import tools_for

BRANCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
BRANCH_MARK = f"{STATE_DIR}/branch"  # written into every branch directory fs creates; --overwrite requires it
CASE_FORMAT = """\
--case FILE: a JSON object; a branch passes when every expectation holds (at least one):
  {"final_contains": "answer = 2",                          it ends with a final message containing this text
   "files": [{"path": "app.py", "content": "..."}],         a workspace file's exact content afterwards
   "results": [{"tool": "run", "contains": "passed"}],      some tool result of that tool contains this text
   "receipts": [{"tool_call_id": "call-2", "tool": "run", "exit_state": "ok" or "error", "result_contains": "passed",
                 "changed_artifacts": []}]}                 a receipt with these fields (changed_artifacts optional)
  Unknown keys, wrong types and missing fields are refused with the file and the key."""

CASE_FIELDS: dict[str, tuple[type, set[str], set[str]]] = {  # list key -> (class, required, optional fields)
    "files": (FileExpectation, {"path", "content"}, set()),
    "results": (ResultExpectation, {"tool", "contains"}, set()),
    "receipts": (ReceiptExpectation, {"tool_call_id", "tool", "exit_state", "result_contains"}, {"changed_artifacts"}),
}


def read_case(path: str) -> EvaluationCase:
    """An evaluation case file, every key and type checked (errors name the file and the key)."""
    d = read_json(path, AgentError)
    if not isinstance(d, dict) or not isinstance(d.get("final_contains", ""), str):
        raise AgentError(f"{path}: must be an object ('final_contains', where given, a string)")
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
    try:
        return EvaluationCase(d.get("final_contains"), parts["files"], parts["results"], parts["receipts"])
    except ValueError as e:
        raise AgentError(f"{path}: {e}") from None


def _run_meta(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    d = read_json(path, AgentError)
    ok = isinstance(d, dict) and isinstance(d.get("root"), str) and isinstance(d.get("model"), str)
    if not ok or not isinstance(d.get("receipt_log"), str | None):
        raise AgentError(f"{path}: must be an object with string 'root' and 'model' (and 'receipt_log' or null)")
    for k in common.LOAD_FLAGS:  # absent in runs saved before they were recorded: loaded as the defaults
        if not isinstance(d.get(k), str | None):
            raise AgentError(f"{path}: {k!r} must be a string or null, got {d[k]!r:.40}")
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


def parse_branch(spec: str, tools: Iterable[str]) -> tuple[str, str, str]:
    """``NAME[:CHOICE]=STEERING`` -> (name, the first step's tool choice, steering)."""
    head, eq, steering = spec.partition("=")
    name, _, choice = head.partition(":")
    check_branch_name(name)
    if not eq or not steering.strip():
        raise AgentError(f"--branch {spec!r}: expected NAME[:CHOICE]=STEERING with a non-empty steering message")
    return name, check_tool_choice(choice or "auto", tools), steering


def cmd_fork(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    run_dir = Path(args.run_dir)
    meta = _run_meta(run_dir)
    cp = load_agent_checkpoint(run_dir / "checkpoint.json")
    case = read_case(args.case)
    tools = tools_for(args.allow_writes, bool(args.allow_command))
    specs = [parse_branch(spec, tools) for spec in args.branch]  # all checked before a model loads or a dir changes
    names = [name for name, _, _ in specs]
    if len(set(names)) != len(names):
        raise AgentError(f"--branch names must differ: {names}")
    common.check_constrained(args, *(choice for _, choice, _ in specs))
    if args.select is not None and args.select not in names:
        raise AgentError(f"--select {args.select!r} names no --branch ({', '.join(names)})")
    if args.model is None:  # the saved run's model, loaded as it was
        args.model = meta["model"]
        for k in common.LOAD_FLAGS:
            setattr(args, k, getattr(args, k) or meta.get(k))
    model, tok = common.load_for(args)
    base = KvPrefixGenerator(model, tok, args.max_tokens, args.enable_thinking, None, args.lookup)
    if (run_dir / "prefix.safetensors").exists() and args.backend == "numpy":
        identity = common.prefix_identity(cp.checkpoint_id, model, tok, args)
        tokens, kv, _ = load_prompt_cache(run_dir / "prefix.safetensors", identity)
        if tuple(tokens) != cp.model.cached_token_ids:
            raise AgentError("prefix.safetensors does not hold the checkpoint's tokens")
        base.adopt_prefix(cp.model, kv)
        print(f"prefix> loaded {len(tokens)} cached tokens from prefix.safetensors (no prefill)", file=out)
    elif base.save_checkpoint(cp.message_dicts()) != cp.model:
        raise AgentError("the saved checkpoint's tokens do not match this model and tokenizer")
    outcomes = []
    args.receipt_log = args.receipt_log or meta["receipt_log"]
    for name, choice, steering in specs:
        bdir = _branch_dir(run_dir, name, args.overwrite)
        shutil.copytree(meta["root"], bdir, symlinks=True)
        (bdir / STATE_DIR).mkdir(mode=0o700, exist_ok=True)
        (bdir / BRANCH_MARK).write_text(name + "\n")
        ws = common.workspace_for(args, bdir, stdin, out)
        generate = base.fork()
        generate.json_schema = common.action_schemas(args, ws, first=choice)
        first = "" if choice == "auto" else f" (first step: tool choice {choice})"
        print(f"branch> {name}: steering {steering!r}{first}", file=out)
        outcome = run_branch(name, steering, cp, generate, ws, ReceiptStore(ws.receipt_store.path), case,
                             AgentLimits(max_steps=args.max_steps), on_event=common.print_event(out))  # fmt: skip
        r = outcome.reuse
        print(
            f"branch> {name}: reused {r.reused_tokens} prefix tokens (layer offsets {r.layer_offsets[:1]}...), "
            f"avoided prefill of {r.avoided_prefill_tokens}; {len(outcome.run.events)} steps, {outcome.run.reason}",
            file=out,
        )
        receipts = ReceiptStore(ws.receipt_store.path).all()
        listed = "".join(f"\n  {x.tool_call_id} {x.tool} {x.exit_state}: {x.result[:60]!r}" for x in receipts)
        print(f"receipts> {len(receipts)} in {ws.receipt_store.path}{listed}", file=out)
        print(outcome.report.render(), file=out)
        outcomes.append(outcome)
    if args.select:
        chosen = select_branch(outcomes, args.select)
        kept = {"branch": chosen.name, "dir": str(run_dir / "branches" / chosen.name), "steering": chosen.steering,
                "checks": [c.name for c in chosen.report.checks]}  # fmt: skip
        write_atomic(run_dir / "selected.json", json.dumps(kept, indent=2) + "\n")
        print(f"selected> {chosen.name} ({kept['dir']}; {run_dir / 'selected.json'})", file=out)
    return 0
