"""``fs-agent run | fork | eval | receipts | walkthrough``: the agent on a real model, with an operator at the approval
prompt.

The subcommands live in ``cli_run`` (run, eval), ``cli_fork`` (fork) and ``cli_walkthrough``; what they set up alike
in ``cli_common``."""

import argparse
import sys
from pathlib import Path
from typing import TextIO

from fs_generate import GenerateError
from fs_kvcache import KVCacheError
from fs_model import ModelError
from fs_tokenizer import TokenizerError
from fs_weights import WeightsError
from fs_weights.command_line import non_negative_int, positive_int, run_main

from . import __version__
from .cli_common import DEFAULT_RECEIPT_LOG, ask
from .cli_fork import CASE_FORMAT, cmd_fork
from .cli_run import cmd_eval, cmd_run
from .cli_walkthrough import WALKTHROUGH, cmd_walkthrough
from .generation import PROMPT_LOOKUP
from .protocol import AgentError
from .receipts import ReceiptStore, repair_log
from .task_packages import EVALS, PackageError

__all__ = ["ask", "main", "parser"]

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
        p.add_argument("--dtype", choices=["float32", "bfloat16", "float16", "native"], help="as fs-generate's")
        p.add_argument("--quantize", choices=["int8", "int4"], help="quantize at load, as fs-generate's")
        p.add_argument("--adapter-path", help="a LoRA adapter fused in at load, as fs-generate's")
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
                "--yes",
                action="store_true",
                help="approve every action the policy allows without asking (writes with --allow-writes, the exact "
                "--allow-command lines); default: ask at the terminal",
            )
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
    fork.add_argument("--model", help="the model (default: the one the saved run used, with its load flags)")
    fork.add_argument(
        "--branch",
        action="append",
        required=True,
        metavar="NAME[:CHOICE]=STEERING",
        help="a branch: its name, the steering message it resumes with and, optionally, the tool choice of its first "
        "step (auto, required, none or a tool's name, as OpenAI's tool_choice; then auto). Repeatable",
    )
    fork.add_argument("--case", required=True, help="evaluation case JSON (format below)")
    fork.add_argument("--select", help="the branch to keep (it must pass): written to RUN_DIR/selected.json")
    fork.add_argument("--overwrite", action="store_true", help="replace branch directories an earlier fork created")
    ev.add_argument(
        "package",
        help="evaluation package directory (task.json, workspace/, held_out_tests/), or the name of a shipped one: "
        + ", ".join(sorted(p.name for p in EVALS.iterdir() if (p / "task.json").is_file())),
    )
    ev.add_argument("--model", help="run the agent with this model (default: fs-generate's demo model, as run)")
    ev.add_argument("--baseline", action="store_true", help="grade the untouched workspace (no model; it must fail)")
    wt = sub.add_parser(
        "walkthrough",
        help="run -> fork -> select on the demo model in DIR, printing each command",
        description=WALKTHROUGH,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    wt.add_argument("dir", nargs="?", default="fs-agent-walkthrough", help="a new or empty directory")
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
COMMANDS = {
    "run": cmd_run,
    "fork": cmd_fork,
    "eval": cmd_eval,
    "receipts": cmd_receipts,
    "walkthrough": cmd_walkthrough,
}


def main(argv: list[str] | None = None, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    args = parser().parse_args(argv)
    stdin, out = stdin or sys.stdin, out or sys.stdout
    return run_main("fs-agent", lambda: COMMANDS[args.cmd](args, stdin, out), KNOWN_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
