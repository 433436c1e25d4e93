"""What calling a layer's q/k/v (and gate/up) together saves (fs_model/cpu/tile_groups.py): decode-step time with
the groups against the same model with each matrix called alone, interleaved in one process, best of ``--rounds``;
the two runs' logits are checked equal first (the groups must not move a bit). 4-bit weights (quantized at load):
Qwen3-0.6B shapes (a random bf16 checkpoint) and the shipped demo model, a 200-token cache.

    uv run --all-packages --all-extras python benchmarks/tile_groups.py [--rounds 5]
"""

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def ungrouped(model: Any) -> Any:
    for block in model.blocks:
        block.attn.qkv = None
        if hasattr(block.mlp, "gate_up"):
            block.mlp.gate_up = None
    return model


def step_ms(model: Any, caches: Any, ids: list[int], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        model(model.tokens_array([ids[:1]]), len(ids), caches, logits_to_keep=1)
        for c in caches:
            c.trim(1)
    return (time.perf_counter() - t0) / calls * 1e3


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from common import qwen3_06b

    from fs_generate.demo import demo_model_path
    from fs_model import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    big = qwen3_06b("bfloat16")
    # only the int8-activation kinds group (4-bit everywhere; tile_groups.TileGroup.of says why)
    cases = {"0.6B int4": (big, {"quantize": "int4"}), "demo int4": (demo_model_path(), {"quantize": "int4"})}
    print("| model | grouped ms/step | one by one ms/step | speedup |\n|---|---|---|---|")
    for name, (path, kw) in cases.items():
        ids = [(7 * i + 3) % 1000 for i in range(200)]
        runs = {"grouped": load_model(path, **kw), "alone": ungrouped(load_model(path, **kw))}
        caches, logits = {}, {}
        for k, m in runs.items():
            caches[k] = m.make_cache()
            logits[k] = np.asarray(m(m.tokens_array([ids]), 0, caches[k], logits_to_keep=4))
        if not np.array_equal(logits["grouped"], logits["alone"]):
            raise SystemExit(f"{name}: the grouped calls changed the logits")
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(args.rounds):
            for k, m in runs.items():
                best[k] = min(best[k], step_ms(m, caches[k], ids, args.calls))
        print(f"| {name} | {best['grouped']:.2f} | {best['alone']:.2f} | {best['alone'] / best['grouped']:.3f}x |")


if __name__ == "__main__":
    main()
