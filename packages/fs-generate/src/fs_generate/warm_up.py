"""Warm-up: a server's first request served at warm speed, by paying the first-run costs before it says ready.

A fresh process pays twice on its first requests: numba compiles the CPU kernels on a machine's first run (then
caches them on disk), and every kernel call shape starts with a thread contest (fs_model/cpu/threads.py). A
server that answered ``/health`` 200 before paying them would make its first client wait 25 s for a request
that takes 0.3 s warm. ``warm_up(model, tokenizer)`` runs two short requests (a prefill chunk and decode steps,
side by side in one batch, as a server runs them) through a throwaway engine with a pool of a few blocks, so the
serving engine's pool, prefix cache and statistics start untouched; it returns the seconds it took.

    seconds = warm_up(model, tokenizer)   # then build the serving Engine and report ready
"""

import time
from typing import Any

from .engine import Engine

PROMPT = list(range(3, 3 + 20))  # 20 ids every vocabulary has: longer than a block, shorter than two
NEW_TOKENS = 8
BLOCK = 16


def warm_up(model: Any, tokenizer: Any) -> float:
    """Run the warm-up requests (module docstring); 0.0 for a model the engine cannot run."""
    if not hasattr(model, "forward_paged"):
        return 0.0
    t0 = time.perf_counter()
    blocks = 2 * (-(-(len(PROMPT) + NEW_TOKENS) // BLOCK))  # both requests' K/V, nothing more
    engine = Engine(
        model,
        tokenizer,
        max_batch=2,
        kv_budget_bytes=blocks * model.kv_block_bytes(BLOCK),
        block_size=BLOCK,
        prefix_cache=False,
    )
    handles = [engine.submit(PROMPT[: len(PROMPT) - i], max_new_tokens=NEW_TOKENS) for i in range(2)]
    engine.run_until_idle()
    for h in handles:
        h.result()
    return time.perf_counter() - t0
