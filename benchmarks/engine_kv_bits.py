"""The engine's K/V pool as codes (``Engine(kv_bits=8 / 4)``) against its bf16 pool, and llama.cpp's quantized K/V
cache (``-ctk q8_0 -ctv q8_0``) against its f16 one, same weights, one run.

    uv run --all-packages --group bench python benchmarks/engine_kv_bits.py [--llama-bin DIR] \\
        [--requests 8] [--context 1024] [--steps 8] [--rounds 3] [--budget-mb 1024]

Random weights with the real Qwen3-0.6B shapes, bf16 kept. Reported per pool:

- capacity: how many positions a ``--budget-mb`` pool holds (the engine's own block count, block size 16);
- decode: ``--requests`` sequences of ``--context`` distinct random tokens each, prefilled, then every engine step
  decodes one token for each (greedy, EOS off). The aggregate decode rate is ``requests`` tokens over the step's
  time, best of ``--rounds`` interleaved rounds of ``--steps`` steps (every pool is timed in every round, so the
  host's drift falls on all alike); the ratio is against the bf16 pool;
- peer: ``llama-batched-bench -npp context -ntg 32 -npl requests -fa on`` with an f16 and a q8_0 K/V cache on the
  GGUF of the same weights: its decode rate (``speed_tg``) and the q8_0 / f16 ratio.

Ratios are computed within this run; read them, not the absolute rates.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

POOLS = {"bf16": None, "8-bit": 8, "4-bit": 4}


def engines(model, args):
    from fs_generate import Engine

    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 150000, args.context).tolist() for _ in range(args.requests)]
    new = args.rounds * args.steps + 4
    out = {}
    for name, bits in POOLS.items():
        e = Engine(model, None, max_batch=args.requests, max_step_tokens=512, kv_bits=bits,
                   kv_budget_bytes=args.budget_mb << 20)  # fmt: skip
        positions = e.pool.num_blocks * e.pool.block_size
        need = args.requests * (args.context + new)
        if positions < need:
            raise SystemExit(f"{name}: a {args.budget_mb} MiB pool holds {positions} positions, the run needs {need}")
        for p in prompts:
            e.submit(p, max_new_tokens=new, eos_token_ids=[])
        t0 = time.perf_counter()
        while e.counters["decode_tokens"] < args.requests:  # every prompt prefilled, everyone decoding
            e.step()
        print(f"  {name}: {positions} positions in {args.budget_mb} MiB; prefilled in {time.perf_counter() - t0:.0f} s")
        out[name] = (e, positions)
    return out


def decode_rates(pools, args):
    best = dict.fromkeys(pools, float("inf"))
    for _ in range(args.rounds):
        for name, (e, _) in pools.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                e.step()
            best[name] = min(best[name], (time.perf_counter() - t0) / args.steps)
    return {name: args.requests / t for name, t in best.items()}


def llama(bindir: Path, args) -> dict:
    sys.path.insert(0, "benchmarks")
    from llama_cpp import run_measured

    gguf = Path("/tmp/fs-bench") / "qwen3-0.6b-bf16.gguf"
    if not gguf.exists():  # the very weights fs runs, exported (cpu_speed.py shares the file)
        from common import qwen3_06b
        from export_gguf import export

        export(qwen3_06b("bfloat16"), gguf, "bf16", Path(args.tokenizer))
    out = {}
    for kind in ("f16", "q8_0"):
        ctx = args.requests * (args.context + 32) + 64
        text, _ = run_measured(
            [bindir / "llama-batched-bench", "-m", gguf, "-c", ctx, "-npp", args.context, "-ntg", 32,
             "-npl", args.requests, "-t", 2, "-fa", "on", "-ctk", kind, "-ctv", kind, "--output-format", "jsonl"]
        )  # fmt: skip
        row = next(json.loads(line) for line in text.splitlines() if line.startswith("{"))
        out[kind] = row["speed_tg"]
    return out


def main() -> None:
    sys.path.insert(0, "benchmarks")
    from common import qwen3_06b

    from fs_model import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget-mb", type=int, default=1024, help="each pool's bytes (bf16 needs 112 KiB a position)")
    ap.add_argument("--llama-bin", help="directory with llama-batched-bench (benchmarks/llama_cpp.py)")
    ap.add_argument("--tokenizer", default=str(Path(__file__).resolve().parents[2] / "shared" / "qwen3-tokenizer"))
    args = ap.parse_args()
    model = load_model(qwen3_06b("bfloat16"), dtype="native")
    print(f"random Qwen3-0.6B shapes, bf16 weights; {args.requests} sequences of {args.context} tokens decoding")
    pools = engines(model, args)
    rates = decode_rates(pools, args)
    for name, (_, positions) in pools.items():
        print(f"fs Engine, {name:5s} pool: {positions:7d} positions in {args.budget_mb} MiB "
              f"({positions / pools['bf16'][1]:.2f}x)  decode {rates[name]:6.1f} tok/s "
              f"({rates[name] / rates['bf16']:.2f}x the bf16 pool)")  # fmt: skip
    if args.llama_bin:
        peer = llama(Path(args.llama_bin), args)
        for kind, tps in peer.items():
            print(f"llama-batched-bench, {kind:4s} K/V: decode {tps:6.1f} tok/s ({tps / peer['f16']:.2f}x f16)")
        print(f"fs 8-bit pool / llama q8_0 K/V: {rates['8-bit'] / peer['q8_0']:.2f}x;"
              f" fs bf16 / llama f16: {rates['bf16'] / peer['f16']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
