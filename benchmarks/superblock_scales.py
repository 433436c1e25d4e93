"""One K-quant matrix on the tiles: reading its super-block records against reading float32 scales and biases.

    uv run nox -s bench -- superblock_scales

Both give every output element the same bits (fs_model/cpu/superblock_scales.py), so which one a call takes is
a speed question only; this measures where each wins, which is what ``tile_calls.RECORD_ROWS`` is set from. Matrices:
a 3072×1024 Q4_K (gate/up, on the 4-bit integer tile) and Q6_K (on the 8-bit tile, groups of 16) that stay in
cache when called again and again, and a 37,984×1024 Q6_K slice of a Qwen3 lm_head (39 MB) read from memory on
every call. Random block bytes with finite float16 factors (the values do not change the time); best of 7
interleaved rounds of 5 calls, M = 1..64 rows.
"""

import time

import numpy as np

from fs_model.cpu import tile_calls, tiles
from fs_model.cpu.affine import AffineLinear, from_mlx
from fs_weights.gguf_blocks import BLOCK_BYTES, FORMATS, SUPERBLOCKS, affine_part, superblock_records

FACTORS = {"Q4_K": (0, 2), "Q6_K": (208,)}  # byte offsets of each block's float16 d (and dmin)
CASES = [("Q4_K", 3072, "in cache"), ("Q6_K", 3072, "in cache"), ("Q6_K", 37984, "from memory")]


def matrix(kind: str, n: int, k: int = 1024) -> tuple[tiles.Tiled, tiles.Tiled]:
    """(the layer's tiles with the records, the same matrix without them)."""
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=(n, k // 256, BLOCK_BYTES[kind]), dtype=np.uint8)
    for at in FACTORS[kind]:
        raw[..., at : at + 2] = rng.uniform(-2e-2, 2e-2, raw.shape[:2]).astype(np.float16)[..., None].view(np.uint8)
    data = raw.reshape(-1)
    bits, G = FORMATS[kind]
    w = from_mlx(*(affine_part(kind, data, (n, k), p) for p in ("weight", "scales", "biases")), bits, G)
    records = (SUPERBLOCKS[kind], superblock_records(kind, data, (n, k)))
    layer = AffineLinear(w.__class__(w.codes, w.scales, w.biases, bits, G, records))
    assert layer.tiles is not None and layer.tiles.layout == records[0], "this CPU runs no tile that reads records"
    return layer.tiles, tiles.Tiled(layer.tiles.kind, w)


def best(f, x: np.ndarray, times: list[float]) -> None:
    t0 = time.perf_counter()
    for _ in range(5):
        f(x)
    times.append((time.perf_counter() - t0) / 5)


def main() -> None:
    tile_calls.RECORD_ROWS = 1 << 30  # every call through the records' tiles, to time them at every M
    print("| matrix | M | records ms | float32 scales ms | records speed-up |")
    print("|---|---|---|---|---|")
    for kind, n, where in CASES:
        with_records, plain = matrix(kind, n)
        for m in (1, 2, 4, 8, 16, 64):
            x = np.random.default_rng(1).standard_normal((m, 1024), dtype=np.float32)
            a: list[float] = []
            b: list[float] = []
            for _ in range(7):
                best(with_records, x, a)
                best(plain, x, b)
            label = f"{kind} {n}×1024 {where} ({with_records.kind})"
            print(f"| {label} | {m} | {min(a) * 1e3:.3f} | {min(b) * 1e3:.3f} | {min(b) / min(a):.2f}× |", flush=True)


if __name__ == "__main__":
    main()
