"""Decode tokens/s, 128 prompt + 128 generated tokens: fs-generate (numpy, MLX) vs mlx-lm, same weights, same run.

    uv run --all-packages --group parity python benchmarks/generate_decode.py [--dtypes float32 bfloat16]

Random checkpoint with the real Qwen3-0.6B shapes; greedy; EOS disabled so every engine decodes all 128 tokens.
Prints each engine's decode tok/s, its ratio to mlx-lm at the same dtype, the weight bytes read per token and
the implied GB/s against this machine's measured single-thread read bandwidth (the batch-1 decode limit).
"""

import argparse
import json
import subprocess
import sys

RUN = """
import json, sys, time
engine, path, dtype, n_prompt, n_gen = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
ids = [(7 * i + 3) % 150000 for i in range(n_prompt)]
if engine == "mlx-lm":
    import mlx.core as mx
    from pathlib import Path
    from mlx_lm.utils import load_model
    from mlx_lm.generate import generate_step
    model, _ = load_model(Path(path))
    if dtype == "float32":
        model.set_dtype(mx.float32)
    t0 = time.perf_counter(); first = None; n = 0
    for tok, _ in generate_step(mx.array(ids), model, max_tokens=n_gen):
        n += 1
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
else:
    from fs_generate import stream_generate
    from fs_model import load_model
    backend = engine.split("-")[1]
    kept = "bfloat16" if engine.endswith("-bf16") else "float32"  # numpy: bf16 bits on the kernels, or float32 copies
    model = load_model(path, backend=backend, dtype=kept if backend == "numpy" else dtype)
    t0 = time.perf_counter(); first = None; n = 0
    for step in stream_generate(model, None, ids, max_new_tokens=n_gen, eos_token_ids=[]):
        n += 1
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
print(json.dumps({"prefill_s": first - t0, "decode_tps": (n - 1) / (end - first), "tokens": n}))
"""


def main() -> None:
    sys.path.insert(0, "benchmarks")
    from common import qwen3_06b, read_bandwidth_gbs

    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--generate", type=int, default=128)
    ap.add_argument("--engines", nargs="+", default=["fs-numpy", "fs-numpy-bf16", "fs-mlx", "mlx-lm"])
    args = ap.parse_args()
    bw = read_bandwidth_gbs()
    print(f"measured single-thread read bandwidth: {bw:.1f} GB/s")
    for dtype in args.dtypes:
        d = qwen3_06b(dtype)
        weight_bytes = sum(f.stat().st_size for f in d.glob("*.safetensors"))
        res = {}
        for engine in args.engines:
            out = subprocess.run(
                [sys.executable, "-c", RUN, engine, str(d), dtype, str(args.prompt), str(args.generate)],
                capture_output=True,
                text=True,
            )
            if out.returncode:
                print(f"{engine} {dtype} failed: {out.stderr[-400:]}")
                continue
            r = res[engine] = json.loads(out.stdout.strip().splitlines()[-1])
            # per token every weight is read once: numpy holds float32 copies of bf16 weights (4 bytes/param)
            per_token = weight_bytes * (2 if engine == "fs-numpy" and dtype != "float32" else 1)
            if engine == "fs-numpy-bf16" and dtype == "float32":
                per_token = weight_bytes // 2
            gbs = per_token * r["decode_tps"] / 1e9
            print(
                f"{dtype:8s} {engine:9s} decode {r['decode_tps']:6.2f} tok/s  prefill({args.prompt}) "
                f"{r['prefill_s']:6.2f}s  weights read/token {per_token / 1e9:.2f} GB -> {gbs:5.1f} GB/s "
                f"({gbs / bw:.0%} of measured bandwidth)"
            )
        if "mlx-lm" in res:
            for engine in ("fs-numpy", "fs-numpy-bf16", "fs-mlx"):
                if engine in res:
                    print(
                        f"{dtype:8s} ratio {engine} / mlx-lm decode = "
                        f"{res[engine]['decode_tps'] / res['mlx-lm']['decode_tps']:.2f}x"
                    )


if __name__ == "__main__":
    main()
