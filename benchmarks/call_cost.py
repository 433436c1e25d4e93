"""What one compiled matrix call costs beyond its bytes: decode-shape int4 matrices (one input row) of growing size,
each streamed from memory, timed through ``tile_calls._run`` - the call a compiled block makes, no Python around it.

    uv run nox -s bench -- call_cost
    uv run --all-packages --all-extras --group bench python benchmarks/call_cost.py [--rounds 5]

Why: a Qwen3-0.6B int4 block's matrices are 8.8 MB, yet its two compiled halves take about twice what streaming
them at a large matrix's rate would; a fixed cost per call (the parallel region, the threads' first lines, the
activations' preparation) would be paid four times a layer. The fit ``time = fixed + bytes / rate`` over the sizes
separates the two. Enough distinct matrices of each size to pass 80 MB (beyond a last-level cache) are walked in
turn, so every call reads from memory; best of the rounds, on 1 and 2 threads. The peer is the largest matrix's own
rate: the fixed part is what the small ones lose against it. The fit is over the rows of 1,024 inputs; o_proj's and
down_proj's shapes (rows of 2,048 and 3,072) are printed beside them to compare at equal bytes.
"""

import argparse
import time
from dataclasses import replace

import numpy as np

from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.threads import pinned
from fs_model.cpu.tile_calls import _run
from fs_weights import f32_to_bf16

# 0.6B's k / v, q, q | k | v and gate | up (rows of 1,024 inputs: the fit), then o and down (longer rows)
SHAPES = [(1024, 1024), (2048, 1024), (4096, 1024), (6144, 1024), (1024, 2048), (1024, 3072)]


def matrices(n: int, k: int, rng: np.random.Generator) -> list[AffineLinear]:
    """int4, groups of 64, bf16 scales (what --quantize int4 keeps): enough of them to pass 80 MB."""
    out = []
    for _ in range(max(4, int(80e6 / (n * k * 0.5625)))):
        w = quantize_affine((rng.standard_normal((n, k)) * 0.1).astype(np.float32), 4, 64)
        out.append(AffineLinear(replace(w, scales=f32_to_bf16(w.scales), biases=f32_to_bf16(w.biases))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    sizes, times = [], {1: [], 2: []}
    print("| matrix | MB | 1 thread µs | GB/s | 2 threads µs | GB/s |\n|---|---|---|---|---|---|")
    for n, k in SHAPES:
        mats = matrices(n, k, rng)
        kind = mats[0].tiles.kind if mats[0].tiles is not None else None
        if kind is None:
            raise SystemExit("the tiles do not run on this CPU")
        x = rng.standard_normal((1, k)).astype(np.float32)
        out = np.empty((1, n), np.float32)
        calls = [m.tiles.call.args(1) for m in mats]  # type: ignore[union-attr]
        row = []
        for T in (1, 2):
            with pinned(T):
                for a in calls:  # warm: compiled, the thread count set
                    _run(*a, x, out)
                best = np.inf
                for _ in range(args.rounds):
                    t0 = time.perf_counter()
                    for a in calls:
                        _run(*a, x, out)
                    best = min(best, (time.perf_counter() - t0) / len(calls))
            if k == SHAPES[0][1]:
                times[T].append(best)
            row.append(f"{best * 1e6:.1f} | {n * k * 0.5625 / best / 1e9:.1f}")
        if k == SHAPES[0][1]:
            sizes.append(n * k * 0.5625)
        print(f"| {n}×{k} ({kind}) | {n * k * 0.5625 / 1e6:.2f} | {' | '.join(row)} |", flush=True)
    for T in (1, 2):
        rate, fixed = np.polyfit(sizes, times[T], 1)  # seconds per byte, seconds
        fit = f"fixed {fixed * 1e6:.1f} µs a call, then {1 / rate / 1e9:.1f} GB/s"
        print(f"{T} thread(s), rows of {SHAPES[0][1]} inputs: {fit}")


if __name__ == "__main__":
    main()
