"""The whole Qwen3-30B-A3B (48 layers, 128 experts, 8 per token) as a random MLX 4-bit checkpoint on this machine:
does it run in 24 GiB, and at what peak RSS against its weight bytes?

    uv run nox -s bench -- moe_full
    uv run --all-packages --all-extras --group bench python benchmarks/moe_full.py [--prefill 16] [--decode 8]

Issue 34's memory goal: weights mmapped, peak RSS <= 1.1x the weight bytes, no float copies of experts. The
checkpoint is written once (~17 GB in the benchmark cache, ~10 minutes: every expert made as float32 random values,
then quantized as mlx-lm's convert does), then a fresh process loads it with the CPU kernels (the int4 codes kept),
prefills ``--prefill`` tokens and decodes ``--decode``. Printed: the weight bytes (the safetensors files), load
seconds, prefill and decode tok/s, and peak RSS (VmHWM) as bytes and as a ratio to the weights.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from fs_weights import preset, write_random_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from common import CACHE
from moe_speed import A3B

CHILD = r"""
import json, sys, time
from pathlib import Path
import numpy as np
from fs_model import load_model
path, S, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.perf_counter()
model = load_model(path)
load_s = time.perf_counter() - t0
ids = [(7 * i + 3) % 150000 for i in range(S)]
caches = model.make_cache()
t0 = time.perf_counter()
model(np.array([ids]), 0, caches, logits_to_keep=1)
prefill_s = time.perf_counter() - t0
t0 = time.perf_counter()
for i in range(N):
    model(np.array([[ids[i]]]), S + i, caches, logits_to_keep=1)
decode_s = time.perf_counter() - t0
hwm = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
           if line.startswith("VmHWM:"))
kind = type(model.blocks[0].mlp.experts[0].down).__name__
print(json.dumps({"load_s": load_s, "prefill_tps": S / prefill_s, "decode_tps": N / decode_s, "peak_rss": hwm,
                  "expert_layer": kind}))
"""


def checkpoint(bits: int) -> Path:
    out = CACHE / f"qwen3-30b-a3b-48l-{bits}bit"
    if not (out / "config.json").exists():
        print(f"writing {out} (random, MLX {bits}-bit, ~10 minutes) ...", flush=True)
        t0 = time.perf_counter()
        write_random_checkpoint(out, preset("tiny", **A3B, num_hidden_layers=48), dtype="bfloat16", quantize=bits,
                                tokenizer="bytes")  # fmt: skip
        print(f"wrote it in {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bits", type=int, default=4, choices=[4, 8])
    ap.add_argument("--prefill", type=int, default=16)
    ap.add_argument("--decode", type=int, default=8)
    args = ap.parse_args()
    path = checkpoint(args.bits)
    weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(args.prefill), str(args.decode)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    got = json.loads(done.stdout.splitlines()[-1])
    print(f"\nQwen3-30B-A3B, 48 layers, MLX {args.bits}-bit, random weights: {weights / 1e9:.2f} GB of safetensors")
    print("| load s | prefill tok/s | decode tok/s | peak RSS GB | peak RSS / weights | expert layers |")
    print("|---|---|---|---|---|---|")
    print(f"| {got['load_s']:.1f} | {got['prefill_tps']:.1f} | {got['decode_tps']:.2f} | {got['peak_rss'] / 1e9:.2f} |"
          f" {got['peak_rss'] / weights:.3f} | {got['expert_layer']} |")  # fmt: skip


if __name__ == "__main__":
    main()
