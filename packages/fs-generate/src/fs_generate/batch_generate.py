"""``generate_batch``: several prompts decoded together, one forward pass per step for the whole batch.

Each row keeps its own ``Generator`` (its rules: sampling, EOS, budget, stops); the batch only shares the passes.
Rows are left-padded to one length, and padding is invisible to attention and to positions, so on batch-invariant
kernels each row's tokens and log-probabilities equal its own ``generate``'s bit for bit.
"""

import time
from collections.abc import Sequence
from typing import Any

from fs_model import CausalLM

from . import keywords
from .errors import GenerateError
from .generate import Generator
from .outputs import Generation
from .step import last_logits, tokens_for


def generate_batch(
    model: CausalLM, tokenizer: Any, prompts: Sequence[str | Sequence[int]], **kw: Any
) -> list[Generation]:
    """Several prompts decoded together: one forward pass per step for the whole batch (prompts left-padded to a
    common length; padding is invisible to attention and to positions), each with its own stop rules. Token
    for token the same as calling ``generate`` on each prompt. ``seed`` seeds every row's generator alike."""
    if isinstance(prompts, str) or not prompts:
        raise GenerateError("generate_batch needs a non-empty list of prompts")
    kw = keywords.resolve("generate_batch", kw)
    if kw.get("draft_model") is not None or kw.get("prompt_lookup_num_tokens"):
        raise GenerateError(
            "generate_batch does not speculate: the Engine does, inside its batches, with the same outputs as "
            "generate (Engine(model, tokenizer, draft_model=..., num_draft_tokens=k), or Engine.submit(..., "
            "prompt_lookup_num_tokens=k)); or call generate per prompt"
        )
    gens = [Generator(model, tokenizer, p, **kw) for p in prompts]
    if any(not g.use_cache or g.prefix_cache is not None for g in gens):
        raise GenerateError("generate_batch always uses the KV cache and no prefix cache")
    live = [g for g in gens if g.start()]
    if not live:
        return [g.result for g in gens]
    P = max(len(g.prompt) for g in live)
    pad = [P - len(g.prompt) for g in live]
    caches = model.make_cache()
    quantize = gens[0].kv_bits or (lambda model, caches: None)  # every row was given the same keywords
    quantize(model, caches)  # as prefill does: before the first pass too
    t0 = time.perf_counter()
    rows = [[0] * p + g.prompt for p, g in zip(pad, live, strict=True)]
    logits = last_logits(model(tokens_for(model, rows), 0, caches, logits_to_keep=1, pad=pad))
    quantize(model, caches)
    for g in live:
        g.result.prompt_seconds, g._t0, g.result.forward_passes = time.perf_counter() - t0, time.perf_counter(), 1
    offset = P
    while True:
        feed = []
        for g, z in zip(live, logits, strict=True):
            feed.append(g.accept(z).token_id if not g.done else 0)  # finished rows feed a dummy token
        if all(g.done for g in live) or offset >= model.config.max_position_embeddings + min(pad):
            break
        logits = last_logits(model(tokens_for(model, [[t] for t in feed]), offset, caches, logits_to_keep=1, pad=pad))
        quantize(model, caches)
        for g in live:
            if not g.done:
                g.result.forward_passes += 1
        offset += 1
    return [g.result for g in gens]
