"""Decode with a quantized KV cache (``--kv-bits 8 / 4``) vs the exact bf16 cache, at long contexts.

    uv run --all-packages python benchmarks/kv_bits.py [--contexts 2048 8192] [--rounds 3]

numpy backend on the fused CPU kernels, random checkpoint with the real Qwen3-0.6B shapes, bf16 weights kept
(the default for a bf16 checkpoint). Peer: the same model with the exact bf16 cache, measured in the same run,
best of ``--rounds`` interleaved rounds. The quantized caches hold exactly the codes a cache quantized from the
first position would (quantization is per position), so the prompt is prefilled once, exact, and converted.
Prints per context: ms per decoded token and the K/V bytes per position for each cache, and the ratios.
"""

import argparse
import sys
import time

import numpy as np


def main() -> None:
    sys.path.insert(0, "benchmarks")
    from common import qwen3_06b

    from fs_model import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--group-size", type=int, default=64)
    args = ap.parse_args()
    model = load_model(qwen3_06b("bfloat16"), dtype="native")
    rng = np.random.default_rng(0)
    print(f"model: random Qwen3-0.6B shapes, bf16 weights, {type(model.blocks[0].attn).__name__}")
    for ctx in args.contexts:
        ids = rng.integers(0, 150000, ctx).tolist()
        exact = model.make_cache()
        t0 = time.perf_counter()
        for at in range(0, ctx, 512):
            model(np.array([ids[at : at + 512]]), at, exact, logits_to_keep=1)
        prefill = time.perf_counter() - t0
        caches = {"bf16": exact}
        for bits in (8, 4):
            caches[f"{bits}-bit"] = [model.quantize_cache(c, bits, args.group_size) for c in exact]
        best = dict.fromkeys(caches, float("inf"))
        for _ in range(args.rounds):
            for name, cs in caches.items():  # interleaved: the host's noise falls on every cache alike
                t0 = time.perf_counter()
                for i in range(args.steps):
                    model(np.array([[ids[i]]]), ctx + i, cs, logits_to_keep=1)
                best[name] = min(best[name], (time.perf_counter() - t0) / args.steps)
                for c in cs:
                    c.trim(args.steps)
        print(f"context {ctx} (prefilled in {prefill:.0f} s):")
        for name, cs in caches.items():
            per_pos = sum(c.nbytes for c in cs) / cs[0]._buf[0].shape[2]
            print(
                f"  {name:6s} {best[name] * 1e3:7.1f} ms/token  {per_pos / 1024:6.1f} KiB/position"
                f"  speed vs bf16 cache {best['bf16'] / best[name]:.2f}x"
                f"  bytes vs bf16 cache {per_pos / (sum(c.nbytes for c in exact) / exact[0]._buf[0].shape[2]):.2f}x"
            )


if __name__ == "__main__":
    main()
