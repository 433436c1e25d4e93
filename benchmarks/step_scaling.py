"""What a decode step costs as the context grows: the step at ``--long`` positions over the step at 128, fs's engine
forward pass against ``llama-bench -d`` on the same weights, each K/V format beside its peer, one run.

    uv run --all-packages --all-extras --group parity --group bench python benchmarks/step_scaling.py \\
        --llama-bin DIR [--formats bf16 int4] [--long 4096] [--rounds 2]

One sequence (issue 36's "decode step at 4,096 <= 1.5x the step at 128"), random weights with Qwen3-0.6B's shapes:
fs through ``forward_paged`` over a block pool of bf16 K/V, of 8-bit and of 4-bit codes (groups of 64: the engine's
``kv_bits``), the context prefilled in chunks of 512 and then ``--steps`` decode steps timed one by one (best kept);
llama.cpp's ``llama-bench -p 0 -n 16 -d 128,LONG`` with an f16 and a q8_0 K/V cache (``-ctk/-ctv q8_0 -fa on``) on
the GGUF of the same weights (bf16 -> BF16, int4 -> Q4_0). Rounds interleave the engines; each keeps its best.

Printed per format and K/V: ms a step at 128 and at LONG, their ratio, and the ratio a step would have if it only
read memory - (weight bytes + K/V bytes at LONG) / (the same at 128) - the floor any engine meets once the weights
and the cache stream from DRAM: bf16 K/V over 4,096 positions are 470 MB a step for 0.6B's 28 layers, more than
its int4 weights.
"""

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import CACHE, qwen3_06b

FORMATS: dict[str, dict[str, Any]] = {"bf16": {}, "int4": {"quantize": "int4"}}
GGUF = {"bf16": "qwen3-0.6b-bf16.gguf", "int4": "qwen3-0.6b-q4_0.gguf"}
POOLS = {"bf16": (), "8-bit": (8, 64), "4-bit": (4, 64)}
PEERS = {"f16": [], "q8_0": ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "1"]}


def step_ms(model: Any, T: int, kv: tuple[int, ...] = (), steps: int = 8) -> float:
    """One sequence's decode step through the engine's paged forward pass at T positions, ms (best of ``steps``);
    ``kv``: (bits, group size) for a pool of codes."""
    from fs_kvcache import BlockPool, BlockTable, PagedBatch

    pool = BlockPool(-(-(T + steps) // 16) + 1, 16)
    store, table = model.make_kv_store(pool, *kv), BlockTable(pool)
    ids = [(7 * i + 3) % 150000 for i in range(T)]
    for a in range(0, T, 512):  # the context, in engine-sized chunks
        chunk = ids[a : a + 512]
        table.reserve(len(chunk), store.copy)
        model.forward_paged(PagedBatch.pack([(table, chunk)]), store)
        table.advance(len(chunk))
    best = float("inf")
    for i in range(steps):
        table.reserve(1, store.copy)
        t0 = time.perf_counter()
        model.forward_paged(PagedBatch.pack([(table, [i + 5])]), store)
        best = min(best, time.perf_counter() - t0)
        table.advance(1)
    return best * 1e3


def llama_ms(bindir: Path, gguf: Path, long: int, extra: list[str]) -> dict[int, float]:
    """``llama-bench -d 128,long``'s decode: ms a token at each depth."""
    from llama_cpp import run_measured

    argv = [bindir / "llama-bench", "-m", gguf, "-p", 0, "-n", 16, "-d", f"128,{long}", "-t", 2, "-r", 1, "-o", "json"]
    rows = json.loads(run_measured([*argv, *extra])[0])
    return {r["n_depth"]: 1e3 / r["avg_ts"] for r in rows if r["n_gen"] > 0}


def weight_bytes(model: Any) -> int:
    """The bytes a decode step reads of the weights: every block's matrices and the output head."""
    from fs_model.numpy.linear import Linear

    layers = {id(x): x for b in model.blocks for part in (b.attn, b.mlp) for x in vars(part).values()
              if isinstance(x, Linear)}  # fmt: skip
    return int(model.lm_head.nbytes) + sum(x.nbytes for x in layers.values())


def main() -> None:
    from fs_model import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", type=Path, help="llama.cpp's bin directory (benchmarks/llama_cpp.py)")
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    ap.add_argument("--long", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    for fmt in args.formats:
        model = load_model(qwen3_06b("bfloat16"), **FORMATS[fmt])
        step_ms(model, 128, steps=2)  # compile, and settle the threads' contests
        W = weight_bytes(model)
        best: dict[tuple[str, int], float] = {}
        for _ in range(args.rounds):
            for name, kv in POOLS.items():
                for T in (128, args.long):
                    best[name, T] = min(best.get((name, T), float("inf")), step_ms(model, T, kv))
            if args.llama_bin:
                for name, extra in PEERS.items():
                    for T, ms in llama_ms(args.llama_bin, CACHE / GGUF[fmt], args.long, extra).items():
                        best[f"llama.cpp {name}", T] = min(best.get((f"llama.cpp {name}", T), float("inf")), ms)
        per_position = {name: model.kv_block_bytes(16, *kv) // 16 for name, kv in POOLS.items()}
        per_position |= {"llama.cpp f16": per_position["bf16"], "llama.cpp q8_0": per_position["bf16"] * 34 // 64}
        print(f"\n{fmt} weights ({W / 1e6:.0f} MB read a step), one sequence, best of {args.rounds} rounds")
        print(f"| K/V | step at 128, ms | step at {args.long}, ms | ratio | memory-only ratio |")
        print("|---|---|---|---|---|")
        for name in dict.fromkeys(n for n, _ in best):
            floor = (W + per_position[name] * args.long) / (W + per_position[name] * 128)
            a, b = best[name, 128], best[name, args.long]
            print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f}x | {floor:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
