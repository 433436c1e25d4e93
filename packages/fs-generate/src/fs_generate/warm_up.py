"""Warm-up: a server's first request served at warm speed, by paying the first-run costs before it says ready.

A fresh process pays three times on its first requests: numba compiles the CPU kernels on a machine's first run
(then caches them on disk), every kernel call shape starts with a thread contest (fs_model/cpu/threads.py), and
the OS maps a fresh K/V pool's pages on their first write. A server that answered ``/health`` 200 before paying
them would make its first client wait 25 s for a request that takes 0.3 s warm.

``warm_up(engine)`` runs short requests through a throwaway engine on the same model with a pool of a few blocks -
one alone (a prefill, then decode steps of one row: a lone client's shapes), then two side by side (a batch's) -
so the serving engine's prefix cache and statistics start untouched. Then it maps the pages of the serving pool's
first blocks (the ones it hands out first: a step's worth of tokens and a block per sequence) and returns the
seconds it took. A decode step calls each matrix shape once per layer, so a 28-layer model settles each of its
contests within a step or two.

    engine = Engine(model, tokenizer, ...)
    seconds = warm_up(engine)             # then start it and report ready
"""

import time

from .engine import Engine

PROMPT = list(range(3, 3 + 20))  # 20 ids every vocabulary has: longer than a block, shorter than two
NEW_TOKENS = 8
BLOCK = 16


def warm_up(serving: Engine) -> float:
    """Run the warm-up requests and map the first blocks of ``serving``'s pool (module docstring)."""
    model, tokenizer = serving.model, serving.tokenizer
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
    for n in (1, 2):  # alone, then a batch of two
        handles = [engine.submit(PROMPT[: len(PROMPT) - i], max_new_tokens=NEW_TOKENS) for i in range(n)]
        engine.run_until_idle()
        for h in handles:
            h.result()
    s, bs = serving.scheduler, serving.pool.block_size
    serving.store.prefault(-(-s.max_step_tokens // bs) + s.max_batch)
    return time.perf_counter() - t0
