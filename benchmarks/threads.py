"""One decode row through every Qwen3-0.6B matrix shape, on 1 and on 2 numba threads, per kept-weight format: does
fanning out pay (the [kernels] issue: 2 threads must never be slower than 1)? Best of 3 interleaved rounds of 50.

    uv run --all-packages --all-extras python benchmarks/threads.py
"""

import time

import numba
import numpy as np

from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.bf16 import Bf16Linear
from fs_weights import f32_to_bf16

SHAPES = {"q_proj": (2048, 1024), "k/v_proj": (1024, 1024), "o_proj": (1024, 2048), "gate/up": (3072, 1024),
          "down": (1024, 3072)}  # fmt: skip


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'matrix':9s} {'format':6s} {'1 thread':>9s} {'2 threads':>9s}  ratio")
    for name, (n, k) in SHAPES.items():
        w = rng.standard_normal((n, k)).astype(np.float32)
        x = rng.standard_normal((1, k)).astype(np.float32)
        layers = {"bf16": Bf16Linear(f32_to_bf16(w)), "int8": AffineLinear(quantize_affine(w, 8)),
                  "int4": AffineLinear(quantize_affine(w, 4))}  # fmt: skip
        for fmt, layer in layers.items():
            best = {1: np.inf, 2: np.inf}
            for threads in (1, 2) * 3:
                numba.set_num_threads(threads)
                layer.matmul(x)
                t0 = time.perf_counter()
                for _ in range(50):
                    layer.matmul(x)
                best[threads] = min(best[threads], (time.perf_counter() - t0) / 50 * 1e3)
            print(f"{name:9s} {fmt:6s} {best[1]:8.3f}ms {best[2]:8.3f}ms  {best[2] / best[1]:.2f}")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


if __name__ == "__main__":
    main()
