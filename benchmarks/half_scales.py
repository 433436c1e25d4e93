"""16-bit scales against float32 copies of them, on whole decode steps: does reading a quantized matrix's scales and
biases in bf16 (cpu/half_scales.py) pay, and by how much?

    uv run nox -s bench -- half_scales
    uv run --all-packages --all-extras python benchmarks/half_scales.py [--formats int4 int8] [--rounds 10]

The random Qwen3-0.6B-shape bf16 checkpoint is quantized at load twice in one process: once as fs keeps it (bf16
scales and biases, as mlx-lm's convert writes them) and once with them widened to float32 (``AffineWeight.widened``,
what fs kept until 2026-12-07: the very same values, so both give the same tokens). Decode steps of the two models
alternate, 32 steps a round, so the host's drift (a shared machine: separate processes moved ±10 % here) falls on
both alike. Printed per format: tok/s best and median of the rounds, and bf16 ÷ float32.
"""

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import qwen3_06b

from fs_model import load_model
from fs_model.numpy import build

PROMPT = [(7 * i + 3) % 150000 for i in range(64)]


def loaded(path: Path, quantize: str, widened: bool) -> Any:
    """The model quantized at load; ``widened``: with float32 copies of its scales and biases."""
    keep = build.quantize_affine
    if widened:
        build.quantize_affine = lambda *a, **kw: keep(*a, **kw).widened()  # type: ignore[assignment]
    try:
        return load_model(path, quantize=quantize)
    finally:
        build.quantize_affine = keep  # type: ignore[assignment]


def decode_tps(model: Any, steps: int = 32, prompt: int = 16) -> float:
    cache = model.make_cache()
    model(np.array([PROMPT[:prompt]]), 0, cache, logits_to_keep=1)
    t0 = time.perf_counter()
    for i in range(steps):
        model(np.array([[PROMPT[prompt + i]]]), prompt + i, cache, logits_to_keep=1)
    return steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--formats", nargs="+", default=["int4", "int8"], choices=["int4", "int8"])
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    path = qwen3_06b("bfloat16")
    print("| format | bf16 scales tok/s best / median | float32 copies | bf16 ÷ float32 (best) |")
    print("|---|---|---|---|")
    for fmt in args.formats:
        half, wide = loaded(path, fmt, widened=False), loaded(path, fmt, widened=True)
        scales = half.blocks[0].mlp.down.w.scales.dtype, wide.blocks[0].mlp.down.w.scales.dtype
        assert scales == (np.uint16, np.float32), scales
        got: dict[str, list[float]] = {"half": [], "wide": []}
        for _ in range(args.rounds):
            got["half"].append(decode_tps(half))
            got["wide"].append(decode_tps(wide))
        h, w = (sorted(got[k]) for k in ("half", "wide"))
        mid = args.rounds // 2
        print(f"| {fmt} | {h[-1]:.2f} / {h[mid]:.2f} | {w[-1]:.2f} / {w[mid]:.2f} | {h[-1] / w[-1]:.3f}× |", flush=True)


if __name__ == "__main__":
    main()
