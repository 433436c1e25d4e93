"""Decode cost with the dense KV cache vs recomputing the prefix, and radix prefix reuse vs a cold prefill.

    uv run --all-packages python benchmarks/kvcache_decode.py [--contexts 128 1024 4096]

numpy backend, random checkpoint with the real Qwen3-0.6B shapes (float32). Peer for decode: the same model
recomputing the whole prefix each token (what a cache-less loop does); peer for reuse: a cold prefill.
"""

import argparse
import sys
import time

import numpy as np


def main() -> None:
    sys.path.insert(0, "benchmarks")
    from common import qwen3_06b

    from fs_kvcache import RadixPrefixCache
    from fs_model import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", type=int, nargs="+", default=[128, 1024, 4096])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="weights kept in memory")
    ap.add_argument("--skip-radix", action="store_true")
    args = ap.parse_args()
    model = load_model(qwen3_06b(args.dtype), dtype=args.dtype)
    rng = np.random.default_rng(0)
    per_token = {}
    for ctx in args.contexts:
        ids = rng.integers(0, 150000, ctx).tolist()
        caches = model.make_cache()
        model(np.array([ids]), 0, caches, logits_to_keep=1)
        t0 = time.perf_counter()
        for i in range(args.steps):
            model(np.array([[ids[i]]]), ctx + i, caches, logits_to_keep=1)
        cached = (time.perf_counter() - t0) / args.steps
        t0 = time.perf_counter()
        model(np.array([[*ids, 1]]), 0, None, logits_to_keep=1)  # one recomputed step
        recompute = time.perf_counter() - t0
        per_token[ctx] = cached
        print(
            f"context {ctx:5d}: cached decode {1 / cached:6.2f} tok/s ({cached * 1e3:7.1f} ms/token) | recompute "
            f"{1 / recompute:6.2f} tok/s | cached / recompute speed = {recompute / cached:7.1f}x"
        )
    lo, hi = min(per_token), max(per_token)
    print(f"decode cost at {hi} context / at {lo} context = {per_token[hi] / per_token[lo]:.2f}x (goal <= 1.5x)")

    if args.skip_radix:
        return
    prefix = rng.integers(0, 150000, 1024).tolist()
    radix = RadixPrefixCache(("qwen3-0.6b-random", "f32"), block_size=16, max_bytes=8 << 30)
    caches = model.make_cache()
    model(np.array([prefix]), 0, caches, logits_to_keep=1)
    radix.insert(prefix, [c.key_values for c in caches])
    question = rng.integers(0, 150000, 16).tolist()
    t0 = time.perf_counter()
    model(np.array([prefix + question]), 0, model.make_cache(), logits_to_keep=1)
    cold = time.perf_counter() - t0
    from fs_kvcache import DenseKVCache

    t0 = time.perf_counter()
    n, state = radix.match(prefix + question)
    warm_caches = [DenseKVCache(key_values=kv) for kv in state]
    model(np.array([(prefix + question)[n:]]), n, warm_caches, logits_to_keep=1)
    warm = time.perf_counter() - t0
    print(
        f"time to first token, 1024-token shared prefix + 16 new tokens: cold prefill {cold * 1e3:.0f} ms, radix hit "
        f"({n} reused) {warm * 1e3:.0f} ms -> {cold / warm:.1f}x faster (goal >= 10x)"
    )


if __name__ == "__main__":
    main()
