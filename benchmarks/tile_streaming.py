"""How fast a decode step's matrix tiles stream their weights, by how many weight rows a call of one input row walks
together (``fs_model.cpu.tiles.TILES``' last entry, NR): the shipped choice against the others, in one process.
Then, for calls of 1 to 8 input rows (a verify pass, a decode batch), where the tiles' software prefetch puts the
lines it fetches ahead (``float_tiles.PREFETCH`` / ``LOCALITY``): the shipped L2 against L1 and none.

    uv run nox -s bench -- tile_streaming
    uv run --all-packages --all-extras --group bench python benchmarks/tile_streaming.py [--rounds 7]

24 distinct matrices of Qwen3-0.6B's gate shape (3072 x 1024: 50-150 MB together, more than a last-level cache), one
input row, every kind this CPU runs a decode step's matrices on (bf16 bits; MLX 8-bit; 4-bit codes with int8
activations in groups of 64 and of 32), both thread counts. The peer is this machine's streaming read of 1 GiB
(``common.read_bandwidth_gbs*``), the rate a decode step would reach at the memory floor; llama.cpp's decode rate
is in cpu_speed.py's table. NR does not change a result (every tile computes an element by the same chain: tiles.py);
each NR's outputs are checked equal to the shipped one's before its time counts.
"""

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import read_bandwidth_gbs, read_bandwidth_gbs_all_cores

from fs_model.cpu import float_tiles, tiles
from fs_model.cpu.affine import quantize_affine
from fs_model.cpu.threads import pinned

N, K, COPIES = 3072, 1024, 24


def with_nr(key: str, nr: int) -> Callable[[], None]:
    """Make a one-row call of the ``TILES[key]`` kind walk ``nr`` weight rows (recompiled on next use); returns the
    undo."""
    shipped = tiles.TILES[key]
    tiles.TILES[key] = (*shipped[:3], (nr, 1))
    tiles._compiled.clear()

    def undo() -> None:
        tiles.TILES[key] = shipped
        tiles._compiled.clear()

    return undo


PREFETCHES = {"L2, 32 KiB ahead (shipped)": (32768, 2), "L1, 16 KiB ahead": (16384, 3), "none": (0, 3)}
ROWS = (1, 2, 4, 5, 8)


def prefetch_table(formats: dict[str, tuple[str, int, Callable[[], object]]], rounds: int) -> None:
    """µs per matrix for calls of ROWS input rows, on both threads, each prefetch placement compiled anew."""
    print("\n| format (kind) | prefetch | " + " | ".join(f"{m} rows" for m in ROWS) + " |")
    print("|---|---|" + "---|" * len(ROWS))
    rng = np.random.default_rng(1)
    xs = {m: rng.standard_normal((m, K), dtype=np.float32) for m in ROWS}
    shipped = float_tiles.PREFETCH, float_tiles.LOCALITY
    for name, (base, G, make) in formats.items():
        kind = tiles.widest(base, K, G)
        if not tiles.applies(base, K, G):
            continue
        weights = [make() for _ in range(COPIES)]
        runs: dict[str, list[tiles.Tiled]] = {}
        for label, (distance, level) in PREFETCHES.items():
            float_tiles.PREFETCH, float_tiles.LOCALITY = distance, level
            tiles._compiled.clear()
            runs[label] = [tiles.Tiled(kind, m) for m in weights]  # compiled now, with this prefetch
        float_tiles.PREFETCH, float_tiles.LOCALITY = shipped
        tiles._compiled.clear()
        best = {(label, m): np.inf for label in runs for m in ROWS}
        with pinned(2):
            for _ in range(rounds):
                for m, x in xs.items():
                    for label, ts in runs.items():
                        t0 = time.perf_counter()
                        for t in ts:
                            t(x)
                        best[label, m] = min(best[label, m], (time.perf_counter() - t0) / COPIES)
        for label in runs:
            cells = " | ".join(f"{best[label, m] * 1e6:.0f}" for m in ROWS)
            print(f"| {name} ({kind}) | {label} | {cells} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    print(f"streaming read: {read_bandwidth_gbs():.1f} GB/s one thread, {read_bandwidth_gbs_all_cores():.1f} all cores")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((N, K), dtype=np.float32) * 0.02
    x = rng.standard_normal((1, K), dtype=np.float32)
    formats: dict[str, tuple[str, int, Callable[[], object]]] = {
        "bf16": ("bf16", 0, lambda: (w.view(np.uint32) >> 16).astype(np.uint16)),
        "MLX 8-bit": ("q8", 64, lambda: quantize_affine(w, 8, 64)),
        "4-bit, groups of 64": ("q4i", 64, lambda: quantize_affine(w, 4, 64)),
        "4-bit, groups of 32 (GGUF Q4_K)": ("q4i", 32, lambda: quantize_affine(w, 4, 32)),
    }
    print("| format | kind | threads | NR | GB/s | vs shipped |\n|---|---|---|---|---|---|")
    for name, (base, G, make) in formats.items():
        kind = tiles.widest(base, K, G)
        if not tiles.applies(base, K, G):
            print(f"| {name} | - | | | not tiled on this CPU | |")
            continue
        key = tiles.tile_key(kind, G)  # the TILES entry (4-bit groups of 32 on VNNI have their own)
        shipped = tiles.TILES[key][3][0]
        weights = [make() for _ in range(COPIES)]
        nbytes = sum(m.nbytes for m in weights)  # type: ignore[attr-defined]
        runs: dict[int, list[tiles.Tiled]] = {}
        for nr in sorted({shipped, 1, 2, 4, 8}):
            undo = with_nr(key, nr)
            runs[nr] = [tiles.Tiled(kind, m) for m in weights]  # compiled now, with this NR
            undo()
        want = [t(x) for t in runs[shipped]]
        for nr, ts in runs.items():
            if not all(np.array_equal(t(x), y) for t, y in zip(ts, want, strict=True)):
                raise SystemExit(f"{name}: NR={nr} changed the outputs")
        for threads in (1, 2):
            best = dict.fromkeys(runs, np.inf)
            with pinned(threads):
                for _ in range(args.rounds):
                    for nr, ts in runs.items():
                        t0 = time.perf_counter()
                        for t in ts:
                            t(x)
                        best[nr] = min(best[nr], time.perf_counter() - t0)
            for nr, t in best.items():
                mark = " (shipped)" if nr == shipped else ""
                print(
                    f"| {name} | {kind} | {threads} | {nr}{mark} | {nbytes / t / 1e9:.1f} | {best[shipped] / t:.2f}× |"
                )
    prefetch_table(formats, args.rounds)


if __name__ == "__main__":
    main()
