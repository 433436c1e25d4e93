"""Batch decode: aggregate tokens/s of generate_batch with 8 prompts vs one prompt, numpy backend, same run.

    uv run --all-packages python benchmarks/generate_batch.py [--batch 8] [--tokens 32]

Random checkpoint with the real Qwen3-0.6B shapes (float32). Batch-1 decode reads every weight once per token;
batch-8 reads them once per step for eight tokens, so the aggregate rate should grow until compute dominates.
"""

import argparse
import sys
import time


def main() -> None:
    sys.path.insert(0, "benchmarks")
    from common import qwen3_06b

    from fs_generate import generate, generate_batch
    from fs_model import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="bfloat16: the bf16 checkpoint with weights kept bf16 (numba kernels)",
    )
    args = ap.parse_args()
    bf16 = args.dtype == "bfloat16"
    model = load_model(qwen3_06b(args.dtype), dtype=args.dtype)
    if bf16:
        generate_batch(model, None, [[1, 2, 3], [4, 5]], max_new_tokens=2, eos_token_ids=[])  # compile kernels first
    prompts = [[(31 * b + 7 * i + 3) % 150000 for i in range(32 + 3 * b)] for b in range(args.batch)]
    t0 = time.perf_counter()
    one = generate(model, None, prompts[0], max_new_tokens=args.tokens, eos_token_ids=[])
    t1 = time.perf_counter() - t0
    t0 = time.perf_counter()
    many = generate_batch(model, None, prompts, max_new_tokens=args.tokens, eos_token_ids=[])
    tb = time.perf_counter() - t0
    solos = [one] + [generate(model, None, p, max_new_tokens=args.tokens, eos_token_ids=[]) for p in prompts[1:]]
    same = [m.token_ids == s.token_ids for m, s in zip(many, solos, strict=True)]
    print(f"rows equal to their solo run: {sum(same)} of {len(same)}")
    assert all(same), same
    r1 = len(one.token_ids) / one.generation_seconds
    rb = sum(len(g.token_ids) for g in many) / (tb - many[0].prompt_seconds)
    print(
        f"batch 1: {r1:.2f} tok/s decode | batch {args.batch}: {rb:.2f} tok/s aggregate decode "
        f"-> {rb / r1:.2f}x (goal >= 4x); wall {t1:.1f}s vs {tb:.1f}s including prefill"
    )


if __name__ == "__main__":
    main()
