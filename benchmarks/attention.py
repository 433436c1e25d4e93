"""The attention kernel alone (``fs_model.cpu.attention``) against numpy's reference attention, in the same run.

    uv run nox -s bench -- attention
    uv run --all-packages --all-extras --group bench python benchmarks/attention.py [--rounds 5]

Qwen3-0.6B's heads (16 query heads over 8 KV heads, head_dim 128) reading a bf16 cache of T positions, for S
queries of one sequence: S = 1 is a decode step, S = 5 a speculative verify of 4 drafts (issue 35's (b): what a
verify pass costs beyond its matrices). The peer is the readable reference (``fs_model.numpy.attention``: BLAS over
float32 K/V, what float32 models run) on the same inputs; numba's pool and OpenBLAS held to the same thread count,
best of ``--rounds`` interleaved rounds. ``--cache 8`` / ``4``: the cache as 8- or 4-bit codes in groups of 64
(``--kv-bits``; the reference reads their dequantized floats). Printed per layer: microseconds, GFLOP/s
(4·nh·S·T·D flops: scores and the weighted sum), the cache bytes the kernel reads per second, and fs ÷ numpy.
Issue 36's attention tile is judged by these columns.
"""

import argparse
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from fs_model.cpu import attention, fused
from fs_model.cpu.threads import pinned
from fs_model.numpy.attention import Attention
from fs_model.numpy.kv_quant import dequantize_kv, quantize_kv

nh, nkv, D = 16, 8, 128
G = nh // nkv


def inputs(T: int, S: int, cache: str, seed: int = 0) -> tuple[np.ndarray, Any, Any, np.ndarray, np.ndarray]:
    """(q, K, V as the kernel reads them, K and V as the float32 values they hold)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, nh, S, D), dtype=np.float32)
    x = [rng.standard_normal((1, nkv, T, D), dtype=np.float32) for _ in range(2)]
    if cache == "bf16":
        K, V = (fused.to_bf16(a) for a in x)
        Kf, Vf = ((a.astype(np.uint32) << 16).view(np.float32) for a in (K, V))  # the same values, widened
    else:
        K, V = (quantize_kv(a, int(cache), 64, False) for a in x)
        Kf, Vf = (np.ascontiguousarray(dequantize_kv(a, int(cache), 64), np.float32) for a in (K, V))
    return q, K, V, Kf, Vf


def cache_bytes(K: Any) -> int:
    return sum(a.nbytes for a in K) if isinstance(K, tuple) else int(K.nbytes)


def best_seconds(fn: Callable[[], None], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--cache", choices=["bf16", "8", "4"], default="bf16", help="bf16 bits, or 8- / 4-bit codes")
    args = ap.parse_args()
    scale = np.float32(D**-0.5)
    ref = SimpleNamespace(scale=scale)  # Attention._attend reads nothing else of its layer
    print("| T | S | threads | fs µs/layer | fs GFLOP/s | fs cache GB/s | numpy µs/layer | fs ÷ numpy time |")
    print("|---|---|---|---|---|---|---|---|")
    for T in (256, 1024, 4096):
        for S in (1, 5):
            q, K, V, Kf, Vf = inputs(T, S, args.cache)
            q5 = q.reshape(1, nkv, G, S, D)
            want = Attention._attend(ref, q5, Kf, Vf, T - S, None).reshape(1, nh, S, D)  # type: ignore[arg-type]
            got = attention.attend(q, K, V, T, scale, None)
            if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
                raise SystemExit(f"T={T} S={S}: the kernel and the reference disagree")
            calls = max(5, 8192 // T)

            def run_fs() -> None:
                attention.attend(q, K, V, T, scale, None)

            def run_numpy() -> None:
                Attention._attend(ref, q5, Kf, Vf, T - S, None)  # type: ignore[arg-type]

            for threads in args.threads:
                fs, ref_t = np.inf, np.inf
                with pinned(threads), threadpool_limits(limits=threads, user_api="blas"):
                    for _ in range(args.rounds):
                        fs = min(fs, best_seconds(run_fs, calls))
                        ref_t = min(ref_t, best_seconds(run_numpy, calls))
                flops, nbytes = 4 * nh * S * T * D, cache_bytes(K) + cache_bytes(V)
                print(f"| {T} | {S} | {threads} | {fs * 1e6:.0f} | {flops / fs / 1e9:.1f} | {nbytes / fs / 1e9:.1f} | "
                      f"{ref_t * 1e6:.0f} | {fs / ref_t:.2f}× |")  # fmt: skip


if __name__ == "__main__":
    main()
