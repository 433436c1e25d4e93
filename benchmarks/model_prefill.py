"""Prefill tokens/s on the real Qwen3-0.6B shapes: fs numpy and MLX backends vs mlx-lm, same weights, same run.

    uv run --all-packages --group parity python benchmarks/model_prefill.py [--lengths 128 512] [--peer-lengths 128]

Peer: mlx-lm (its own load_model + call) on MLX's CPU backend, float32. Prints each ratio against it, the
achieved GFLOP/s against numpy's measured GEMM peak, and peak RSS against the weights' bytes. Each engine runs in
its own process so RSS is its own.
"""

import argparse
import json
import subprocess
import sys
import time

RUN = """
import json, sys, time
sys.path.insert(0, "benchmarks")
from common import peak_rss
engine, path, S = sys.argv[1], sys.argv[2], int(sys.argv[3])
ids = [(7 * i + 3) % 150000 for i in range(S)]
if engine == "mlx-lm":
    import mlx.core as mx
    from pathlib import Path
    from mlx_lm.utils import load_model
    model, _ = load_model(Path(path))
    run = lambda: mx.eval(model(mx.array([ids]))[:, -1])
else:
    import numpy as np
    from fs_model import load_model
    backend = engine.split("-")[1]
    model = load_model(path, backend=backend, dtype="float32")
    if backend == "mlx":
        import mlx.core as mx
        run = lambda: mx.eval(model(mx.array([ids]), 0, None, logits_to_keep=1))
    else:
        run = lambda: model(np.array([ids]), 0, None, logits_to_keep=1)
run()  # warm-up
best = float("inf")
for _ in range(2 if S <= 128 else 1):
    t0 = time.perf_counter(); run(); best = min(best, time.perf_counter() - t0)
print(json.dumps({"seconds": best, "rss": peak_rss()}))
"""


def main() -> None:
    sys.path.insert(0, "benchmarks")
    from common import matmul_peak_gflops, prefill_flops, qwen3_06b

    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    ap.add_argument(
        "--peer-lengths",
        type=int,
        nargs="+",
        default=[128],
        help="mlx-lm f32 prefill runs ~2 tok/s here; 512 tokens take minutes",
    )
    args = ap.parse_args()
    d = qwen3_06b("float32")
    weight_bytes = sum(f.stat().st_size for f in d.glob("*.safetensors"))
    peak = matmul_peak_gflops()
    print(f"checkpoint {d} ({weight_bytes / 1e9:.2f} GB f32); numpy GEMM peak here: {peak:.1f} GFLOP/s")
    results = {}
    for S in args.lengths:
        for engine in ("fs-numpy", "fs-mlx", "mlx-lm"):
            if engine == "mlx-lm" and S not in args.peer_lengths:
                continue
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", RUN, engine, str(d), str(S)], capture_output=True, text=True)
            if out.returncode:
                print(f"{engine} S={S} failed: {out.stderr[-500:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results[(engine, S)] = r
            gf = prefill_flops(S) / r["seconds"] / 1e9
            print(
                f"S={S:4d} {engine:9s} {S / r['seconds']:8.1f} tok/s  {gf:6.1f} GFLOP/s ({gf / peak:.0%} of peak)  "
                f"peak RSS {r['rss'] / 1e9:.2f} GB = {r['rss'] / weight_bytes:.2f}x weights "
                f"[{time.perf_counter() - t0:.0f}s wall]"
            )
        peer = results.get(("mlx-lm", S))
        for engine in ("fs-numpy", "fs-mlx"):
            if peer and (engine, S) in results:
                print(
                    f"S={S:4d} ratio {engine} / mlx-lm prefill tok/s = "
                    f"{peer['seconds'] / results[(engine, S)]['seconds']:.2f}x"
                )


if __name__ == "__main__":
    main()
