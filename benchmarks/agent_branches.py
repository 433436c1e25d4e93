"""Two agent branches from one checkpoint: one after the other (``run_branch``) vs at once (``run_branches``, one
engine), the same Qwen3-0.6B-shaped random bf16 weights with the real tokenizer, same run.

    uv run --all-packages --group bench python benchmarks/agent_branches.py [--branches 2] [--max-tokens 48]

Each branch resumes the checkpoint with its own steering and runs the agent loop for ``--steps`` responses of up
to ``--max-tokens`` tokens (a random model's replies are not valid actions, so every step is a full-length
response - the decode-bound case). Sequential: ``run_branch`` with ``KvPrefixGenerator.fork()`` (the prefix's K/V
shared, each response decoded alone). Concurrent: ``run_branches`` (the prefix prefilled once into the engine's
block cache; both branches' responses decoded in the same forward passes). Asserts the outcomes are equal, prints
wall times and their ratio (goal: concurrent >= 1.6x faster for two branches).
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    sys.path.insert(0, "benchmarks")
    from common import CACHE

    from fs_agent import (
        AgentLimits,
        Branch,
        EvaluationCase,
        KvPrefixGenerator,
        ReceiptStore,
        ToolPolicy,
        Workspace,
        build_system_prompt,
        create_checkpoint,
        initial_messages,
        run_branch,
        run_branches,
    )
    from fs_agent.loop import TOOL_RESULT
    from fs_generate import load
    from fs_weights import preset, write_random_checkpoint

    ap = argparse.ArgumentParser()
    ap.add_argument("--branches", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tokenizer", default=str(Path(__file__).resolve().parents[2] / "shared" / "qwen3-tokenizer"))
    args = ap.parse_args()
    # the 0.6B shapes with the tokenizer's own vocabulary: a random model must not emit ids the tokenizer lacks
    model_dir = CACHE / "qwen3-0.6b-bfloat16-agent"
    if not (model_dir / "config.json").exists():
        write_random_checkpoint(model_dir, preset("qwen3-0.6b", vocab_size=151669), dtype="bfloat16",
                                tokenizer=args.tokenizer)  # fmt: skip
    model, tok = load(str(model_dir))

    def workspace(root: Path) -> Workspace:
        policy = ToolPolicy(root, allow_writes=True, allowed_commands=())
        return Workspace(policy, confirm_tool=lambda a: True, receipt_store=ReceiptStore(root / "receipts.jsonl"))

    tmp = Path(tempfile.mkdtemp(prefix="fs-branch-ws-"))
    root = tmp / "prefix"
    root.mkdir()
    (root / "app.py").write_text("answer = 1\n")
    task = "set the answer to 2"
    messages = [
        *initial_messages(task, build_system_prompt(workspace(root))),
        {"role": "assistant", "content": '{"tool":"read_file","path":"app.py"}'},
        {"role": "user", "content": TOOL_RESULT + "answer = 1\n"},
    ]
    base = KvPrefixGenerator(model, tok, max_tokens=args.max_tokens)
    cp = create_checkpoint(task, messages, base.save_checkpoint(messages))
    case = EvaluationCase(final_contains="done")
    limits = AgentLimits(max_steps=args.steps, max_invalid_actions=args.steps)
    names = [f"branch-{i}" for i in range(args.branches)]
    for way in ("seq", "conc", "warm"):
        for n in names:
            shutil.copytree(root, tmp / way / n)

    def branches(way: str) -> list:
        return [
            Branch(n, f"steer {n}", workspace(tmp / way / n), ReceiptStore(tmp / way / n / "receipts.jsonl"), case)
            for n in names
        ]

    # warm: compile the kernels and load the engine path once, untimed
    run_branches(branches("warm"), cp, model, tok, max_tokens=4, limits=AgentLimits(max_steps=1))
    t0 = time.perf_counter()
    seq = [
        run_branch(b.name, b.steering, cp, base.fork(), b.workspace, b.receipts, case, limits) for b in branches("seq")
    ]
    t_seq = time.perf_counter() - t0
    t0 = time.perf_counter()
    conc = run_branches(branches("conc"), cp, model, tok, max_tokens=args.max_tokens, limits=limits)
    t_conc = time.perf_counter() - t0
    assert [o.run for o in seq] == [o.run for o in conc], "concurrent outcomes differ from sequential ones"
    tokens = sum(len(e.response) for o in seq for e in o.run.events)
    print(
        f"{args.branches} branches x {args.steps} responses of <= {args.max_tokens} tokens "
        f"(prefix {len(cp.model.cached_token_ids)} tokens, {tokens} response chars): "
        f"sequential {t_seq:.1f}s, concurrent {t_conc:.1f}s -> {t_seq / t_conc:.2f}x (goal >= 1.6x)"
    )


if __name__ == "__main__":
    main()
