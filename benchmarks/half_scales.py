"""16-bit scales against float32 copies of them, on whole decode steps: does reading a quantized matrix's scales and
biases in bf16 (cpu/half_scales.py) pay, and by how much?

    uv run nox -s bench -- half_scales
    uv run --all-packages --all-extras python benchmarks/half_scales.py [--formats int4 int8] [--rounds 10]
        [--llama-bin DIR [--gguf FILE ...]]

The random Qwen3-0.6B-shape bf16 checkpoint is quantized at load twice in one process: once as fs keeps it (bf16
scales and biases, as mlx-lm's convert writes them) and once with them widened to float32 (``AffineWeight.widened``,
what fs kept until 2026-12-07: the very same values, so both give the same tokens). Decode steps of the two models
alternate, 32 steps a round, so the host's drift (a shared machine: separate processes moved ±10 % here) falls on
both alike. Printed per format: tok/s best and median of the rounds, and bf16 ÷ float32.

With ``--llama-bin`` (llama-quantize makes the 0.6B Q4_0 file, as kquant_speed.py does) or ``--gguf`` files: GGUF
Q4_0 / Q5_0 matrices, whose biases are -8d / -16d, read two ways in one process - the column tiles making each bias
from its float16 scale (half_scales.SYMMETRIC, what fs does) and reading the stored float16 biases (``symmetric``
patched to say no at load: the same values, so the same tokens, checked) - tok/s and made ÷ stored.
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
from fs_model.cpu import half_scales
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


def stored_biases(path: Path) -> Any:
    """The GGUF file loaded with its symmetric groups' float16 biases read as stored."""
    keep = half_scales.symmetric
    half_scales.symmetric = lambda *a: False  # type: ignore[assignment]
    try:
        return load_model(path)
    finally:
        half_scales.symmetric = keep  # type: ignore[assignment]


def decode_tps(model: Any, steps: int = 32, prompt: int = 16) -> float:
    cache = model.make_cache()
    model(np.array([PROMPT[:prompt]]), 0, cache, logits_to_keep=1)
    t0 = time.perf_counter()
    for i in range(steps):
        model(np.array([[PROMPT[prompt + i]]]), prompt + i, cache, logits_to_keep=1)
    return steps / (time.perf_counter() - t0)


def logits(model: Any, n: int = 8) -> np.ndarray:
    """A prompt's last logits and n greedy steps' [n + 1, V]."""
    cache = model.make_cache()
    out = [model(np.array([PROMPT[:16]]), 0, cache, logits_to_keep=1)[0, -1]]
    for i in range(n):
        out.append(model(np.array([[int(np.argmax(out[-1]))]]), 16 + i, cache, logits_to_keep=1)[0, -1])
    return np.stack(out)


def symmetric_rows(files: list[Path], rounds: int) -> None:
    print("\n| GGUF file | biases made tok/s best / median | stored | made ÷ stored (best) |\n|---|---|---|---|")
    for f in files:
        made, stored = load_model(f), stored_biases(f)
        assert np.array_equal(logits(made), logits(stored)), "the same values must give the same bits"
        got: dict[str, list[float]] = {"made": [], "stored": []}
        for _ in range(rounds):
            got["made"].append(decode_tps(made))
            got["stored"].append(decode_tps(stored))
        a, b = (sorted(got[k]) for k in ("made", "stored"))
        mid = rounds // 2
        print(f"| {f.name} | {a[-1]:.2f} / {a[mid]:.2f} | {b[-1]:.2f} / {b[mid]:.2f} | {a[-1] / b[-1]:.3f}× |",
              flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--formats", nargs="+", default=["int4", "int8"], choices=["int4", "int8"])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--llama-bin", type=Path, help="llama.cpp's bin directory: makes the 0.6B Q4_0 file")
    ap.add_argument("--gguf", type=Path, nargs="*", default=[], help="GGUF Q4_0 / Q5_0 files to compare")
    ap.add_argument("--tokenizer", default=str(Path(__file__).resolve().parents[2] / "shared" / "qwen3-tokenizer"))
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
    files = list(args.gguf)
    if args.llama_bin is not None:
        from kquant_speed import gguf_files

        files = [*gguf_files(args.llama_bin, args.tokenizer, ["Q4_0"]).values(), *files]
    if files:
        symmetric_rows(files, args.rounds)


if __name__ == "__main__":
    main()
