"""One decode row through every Qwen3-0.6B matrix shape, per kept-weight format, on 1 and on 2 numba threads (pinned)
and as fs runs it by default (each call shape timing both and keeping the faster: fs_model/cpu/threads.py). The
[kernels] issue: 2 threads must never be slower than 1; "auto" must be within noise of the better of the two.
Best of 3 interleaved rounds of 50. Then whole decode steps of a random bf16 Qwen3-0.6B (32 tokens after a
19-token prompt, best of 3 interleaved). ``--busy`` runs a busy loop on another process meanwhile (a shared machine).

    uv run --all-packages --all-extras python benchmarks/threads.py [--busy]
"""

import subprocess
import sys
import time

import numpy as np
from common import qwen3_06b

from fs_model import load_model
from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.bf16 import Bf16Linear
from fs_model.cpu.threads import choices, forget, pinned
from fs_weights import f32_to_bf16

SHAPES = {"q_proj": (2048, 1024), "k/v_proj": (1024, 1024), "o_proj": (1024, 2048), "gate/up": (3072, 1024),
          "down": (1024, 3072)}  # fmt: skip


def timed(layer, x) -> float:
    layer.matmul(x)
    t0 = time.perf_counter()
    for _ in range(50):
        layer.matmul(x)
    return (time.perf_counter() - t0) / 50 * 1e3


def main() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if "--busy" in sys.argv else None
    rng = np.random.default_rng(0)
    print(f"{'matrix':9s} {'format':6s} {'1 thread':>9s} {'2 threads':>9s} {'auto':>9s}  2/1   auto/best  auto chose")
    try:
        for name, (n, k) in SHAPES.items():
            w = rng.standard_normal((n, k)).astype(np.float32)
            x = rng.standard_normal((1, k)).astype(np.float32)
            layers = {"bf16": Bf16Linear(f32_to_bf16(w)), "int8": AffineLinear(quantize_affine(w, 8)),
                      "int4": AffineLinear(quantize_affine(w, 4))}  # fmt: skip
            for fmt, layer in layers.items():
                best = {1: np.inf, 2: np.inf, "auto": np.inf}
                forget()
                for side in (1, 2, "auto") * 3:
                    if side == "auto":
                        best[side] = min(best[side], timed(layer, x))
                        continue
                    with pinned(side):
                        best[side] = min(best[side], timed(layer, x))
                chose = sorted(set(choices().values()))
                print(
                    f"{name:9s} {fmt:6s} {best[1]:8.3f}ms {best[2]:8.3f}ms {best['auto']:8.3f}ms  "
                    f"{best[2] / best[1]:.2f}  {best['auto'] / min(best[1], best[2]):.2f}       {chose}"
                )
        decode_steps()
    finally:
        if busy is not None:
            busy.kill()


def decode_steps() -> None:
    model = load_model(qwen3_06b("bfloat16"))

    def rate() -> float:
        cache = model.make_cache()
        model.forward(list(range(1, 20)), cache)
        t0 = time.perf_counter()
        for i in range(32):
            model.forward([7 + i], cache)
        return 32 / (time.perf_counter() - t0)

    forget()
    best = {1: 0.0, 2: 0.0, "auto": 0.0}
    for side in (1, 2, "auto") * 3:
        if side == "auto":
            best[side] = max(best[side], rate())
            continue
        with pinned(side):
            best[side] = max(best[side], rate())
    print(
        f"0.6B bf16 decode: 1 thread {best[1]:.1f} tok/s, 2 threads {best[2]:.1f}, auto {best['auto']:.1f} "
        f"({best['auto'] / max(best[1], best[2]):.2f} of the better)"
    )


if __name__ == "__main__":
    main()
