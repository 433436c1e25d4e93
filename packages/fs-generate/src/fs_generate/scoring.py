"""How likely the model finds a text: the log-probability of every token given the ones before it.

Why: ``echo`` with ``logprobs`` on ``/v1/completions`` (lm-eval's loglikelihood tasks) and ``fs-perplexity``
both ask it, and one function answers both, so the two can never disagree.

Contract: ``score(model, rows)`` for ``rows [B][S]`` of equal length ``S >= 1`` returns, per row, ``S`` entries:
entry ``0`` is ``None`` (nothing predicts the first token), entry ``i`` is
``log softmax(logits at position i-1)[row[i]]`` on the raw float32 logits (temperature 1, no filtering), in
float64: ``Generation.logprobs``'s arithmetic for a generated token. The prompt is fed ``chunk`` positions per
forward pass through a KV cache, so the logits held at once are ``[B, chunk, V]`` and never ``[B, S, V]``:
at Qwen3's V = 151,936, 8 rows of 64 positions are 311 MB of float32.

    scored = score(model, [[9707, 11, 1879]])      # "Hello, world": one row, S = 3
    scored[0].logprobs                             # [None, log p(","|"Hello"), log p(" world"|"Hello,")]
    math.exp(-sum(scored[0].logprobs[1:]) / 2)     # its perplexity (fs-perplexity's figure)
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fs_kvcache import to_numpy
from fs_model import CausalLM

from .errors import GenerateError
from .step import tokens_for

CHUNK = 64  # positions per pass: the [B, chunk, V] logits are the memory this costs


@dataclass
class Scored:
    token_ids: list[int]
    logprobs: list[float | None]  # per token; the first is None
    top_logprobs: list[tuple[tuple[int, float], ...]] = field(default_factory=list)  # per token, () for the first


def log_softmax(z: np.ndarray) -> np.ndarray:
    """Rows of float32 logits ``[N, V]`` -> float64 log-probabilities (``sampling.logprob``'s arithmetic)."""
    z = z.astype(np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def _tops(lp: np.ndarray, k: int) -> tuple[tuple[int, float], ...]:
    """The ``k`` likeliest of one row, most likely first, ties in id order (``sampling.top_logprobs``'s rule)."""
    cut = np.partition(lp, lp.shape[0] - k)[lp.shape[0] - k]
    near = np.flatnonzero(lp >= cut)
    ids = near[np.lexsort((near, -lp[near]))][:k]
    return tuple((int(i), float(lp[i])) for i in ids)


def check_rows(model: CausalLM, rows: list[list[int]], top_logprobs: int) -> None:
    """``score``'s arguments, checked without computing: a ``GenerateError`` naming the row and position."""
    if not rows or not rows[0]:
        raise GenerateError("score needs at least one non-empty row of token ids")
    n = len(rows[0])
    if any(len(r) != n for r in rows):
        raise GenerateError("score's rows must all have the same length (batch equal-length sequences)")
    V, ctx = model.vocab_size, model.config.max_position_embeddings
    if n > ctx:
        raise GenerateError(f"the text is {n} tokens; the model's context is {ctx}")
    for b, r in enumerate(rows):
        bad = next((i for i, t in enumerate(r) if type(t) is not int or not 0 <= t < V), None)
        if bad is not None:
            raise GenerateError(f"row {b}: token id {r[bad]!r} at position {bad} is out of range [0, {V})")
    if type(top_logprobs) is not int or not 0 <= top_logprobs <= 20:
        raise GenerateError(f"top_logprobs must be an int in [0, 20], got {top_logprobs!r}")


def score(model: CausalLM, rows: Sequence[Sequence[int]], top_logprobs: int = 0, chunk: int = CHUNK) -> list[Scored]:
    """Every token's log-probability given the tokens before it, for each of ``rows`` (module docstring)."""
    ids: list[list[int]] = [list(r) for r in rows]
    check_rows(model, ids, top_logprobs)
    S, V = len(ids[0]), model.vocab_size
    out = [Scored(r, [None], [()] if top_logprobs else []) for r in ids]
    caches = model.make_cache()
    for at in range(0, S - 1, chunk):  # position p's logits predict token p + 1: the last token predicts nothing
        piece = [r[at : min(at + chunk, S - 1)] for r in ids]
        logits = np.asarray(to_numpy(model(tokens_for(model, piece), at, caches)), dtype=np.float32)  # [B, n, V]
        for b, s in enumerate(out):
            lp = log_softmax(logits[b])
            nxt = np.asarray(ids[b][at + 1 : at + 1 + len(piece[b])])
            s.logprobs.extend(lp[np.arange(len(nxt)), nxt].tolist())
            if top_logprobs:
                s.top_logprobs.extend(_tops(row, min(top_logprobs, V)) for row in lp)
    return out
