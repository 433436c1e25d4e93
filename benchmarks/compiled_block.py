"""What running each decoder block as two compiled calls saves (fs_model/cpu/compiled_block.py): decode-step time
with the compiled halves against the same model, in the same process, with every block on the Python path it
replaces (``InvariantBlock``: ~20 calls a layer), interleaved, best of ``--rounds``. The two paths' logits are
checked equal first (the compiled halves must not move a bit). Qwen3-0.6B shapes (a random bf16 checkpoint) as
bf16, int8 and int4, plus any ``--gguf`` file as it is (``dtype="native"``: a Q4_K_M file on its K-quant tiles),
a 64-token cache.

    uv run --all-packages --all-extras python benchmarks/compiled_block.py [--rounds 7] [--gguf FILE ...]
"""

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def use(model: Any, plans: list[Any], compiled: bool) -> None:
    for block, plan in zip(model.blocks, plans, strict=True):
        block.plan = plan if compiled else None


def step_ms(model: Any, caches: Any, ids: list[int], calls: int) -> float:
    t0 = time.perf_counter()
    for i in range(calls):
        model(model.tokens_array([ids[i : i + 1]]), len(ids), caches, logits_to_keep=1)
        for c in caches:
            c.trim(1)
    return (time.perf_counter() - t0) / calls * 1e3


def measure(name: str, model: Any, rounds: int) -> None:
    plans = [b.plan for b in model.blocks]
    if not all(p is not None for p in plans):
        print(f"| {name} | - | - | - | (blocks on the Python path: no tiles on this CPU, or a MoE layer) |")
        return
    ids = [(7 * i + 3) % 150000 for i in range(64)]
    caches = model.make_cache()
    model(model.tokens_array([ids]), 0, caches, logits_to_keep=1)
    logits = []
    for compiled in (True, False):
        use(model, plans, compiled)
        logits.append(model(model.tokens_array([ids[:1]]), len(ids), caches, logits_to_keep=1))
        for c in caches:
            c.trim(1)
        step_ms(model, caches, ids, 20)  # warm: compilation, the thread contests of both paths
    if not np.array_equal(logits[0], logits[1]):
        raise SystemExit(f"{name}: the compiled block changed the logits")
    best = {True: np.inf, False: np.inf}
    for _ in range(rounds):
        for compiled in (True, False):
            use(model, plans, compiled)
            best[compiled] = min(best[compiled], step_ms(model, caches, ids, 16))
    use(model, plans, True)
    print(f"| {name} | {best[True]:.2f} | {best[False]:.2f} | {best[False] / best[True]:.3f}× |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--gguf", nargs="*", default=[], type=Path, help="GGUF files to time as they are")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from common import qwen3_06b

    from fs_model import load_model

    ck = qwen3_06b("bfloat16")
    print(f"\nQwen3-0.6B shapes, decode step over a 64-token cache, best of {args.rounds} interleaved rounds")
    print("| weights | compiled block ms | Python block ms | speedup |\n|---|---|---|---|")
    for fmt in ("bf16", "int8", "int4"):
        measure(fmt, load_model(ck, **({} if fmt == "bf16" else {"quantize": fmt})), args.rounds)
    for path in args.gguf:
        measure(path.name, load_model(path, dtype="native"), args.rounds)


if __name__ == "__main__":
    main()
