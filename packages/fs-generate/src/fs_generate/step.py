"""The decode step everything in fs decodes with: feed tokens, choose one, feed it, repeat.

``generate_step(model, prompt_ids, caches, sampler)`` (mlx-lm's shape) prefills ``prompt_ids`` at ``offset`` in
chunks, then yields ``(token, logprob)`` for each new token, feeding that token on the next ``next()`` - so a
caller that stops after a token pays no extra forward pass. ``fs_generate.generate``, ``generate_batch`` and the
fs-agent's decoding all go through ``prefill`` / ``generate_step``; stop rules are the caller's.

The model is anything with the tiny-llm Week-4 call ``model(tokens [B, S], offset, caches, logits_to_keep=1)``.
Its tokens are ``model.tokens_array(rows)`` where it has one. A model without it (the course's own) gets
``mx.array`` int32 tokens when it is an MLX model - an ``mlx.nn.Module``, a model holding an MLX array or the MLX
module among its attributes, or one whose class is defined in a module that imports MLX - and otherwise tokens of
the array type its caches or logits turn out to use (numpy int64 until one is seen).
"""

import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from fs_kvcache import is_mlx, to_numpy
from fs_model import CausalLM

from .sampling import logprob

PREFILL_CHUNK = 512  # prompt tokens per forward pass: bounds the activations of a long prompt

Sampler = Callable[[np.ndarray], int]  # float32 logits [V] -> token id
AfterPass = Callable[[CausalLM, Sequence[Any] | None], None]  # (model, caches) after each forward pass (kv_bits.py)


def greedy(logits: np.ndarray) -> int:
    return int(np.argmax(logits))


def _is_mlx_module(x: Any) -> bool:
    return isinstance(x, types.ModuleType) and x.__name__.split(".")[0] == "mlx"


def is_mlx_model(model: Any) -> bool:
    """The rule for a model without ``tokens_array`` (module docstring): is MLX its array type? Decided from what
    the model is, before its first call, since a course model may ``tokens.astype(mx.float32)`` on an empty cache."""
    for cls in type(model).__mro__:
        if cls.__module__.split(".")[0] == "mlx":  # mlx.nn.Module and its subclasses
            return True
        module = sys.modules.get(cls.__module__)
        if module is not None and any(_is_mlx_module(v) for v in vars(module).values()):
            return True
    return any(is_mlx(v) or _is_mlx_module(v) for v in getattr(model, "__dict__", {}).values())


def tokens_for(model: CausalLM, rows: list[list[int]], like: Any = None) -> Any:
    """``rows`` as the [B, S] token array ``model`` takes: its own ``tokens_array``, else MLX's for an MLX model
    (``is_mlx_model``), else the array type of ``like`` (a cache's keys or the last logits), else numpy int64."""
    make = getattr(model, "tokens_array", None)
    if make is not None:
        return make(rows)
    if (like is not None and is_mlx(like)) or is_mlx_model(model):
        import mlx.core as mx

        return mx.array(rows, dtype=mx.int32)
    return np.asarray(rows, dtype=np.int64)


def last_logits(out: Any) -> np.ndarray:
    """The model's output [B, S', V] -> float32 numpy [B, V] at the last position."""
    return np.asarray(to_numpy(out[:, -1]), dtype=np.float32)


def _cache_array(model: CausalLM, caches: Sequence[Any] | None) -> Any:
    """An array of the caches' kind, for a model without ``tokens_array`` (asked only then: a rotating cache
    builds its ``key_values`` in temporal order, a copy)."""
    if hasattr(model, "tokens_array"):
        return None
    kv = getattr(caches[0], "key_values", None) if caches else None
    return kv[0] if kv is not None else None


def prefill(
    model: CausalLM,
    ids: Sequence[int],
    caches: Sequence[Any] | None,
    offset: int = 0,
    chunk: int = PREFILL_CHUNK,
    after_pass: AfterPass | None = None,
) -> tuple[np.ndarray, int]:
    """Feed ``ids`` at ``offset`` (``chunk`` tokens per pass; all at once without caches) -> (last logits [V],
    forward passes). Needs at least one id. ``after_pass(model, caches)`` runs before the first pass and after every
    pass (``--kv-bits``: a cache that already holds ``start`` positions is quantized before any pass reads it)."""
    ids = list(ids)
    if after_pass is not None:
        after_pass(model, caches)
    like, passes, out = _cache_array(model, caches), 0, None
    step = chunk if caches is not None else max(1, len(ids))
    for at in range(0, len(ids), step):
        out = model(tokens_for(model, [ids[at : at + step]], like), offset + at, caches, logits_to_keep=1)
        like, passes = out, passes + 1
        if after_pass is not None:
            after_pass(model, caches)
    assert out is not None, "prefill needs at least one token"
    return last_logits(out)[0], passes


def generate_step(
    model: CausalLM,
    prompt_ids: Sequence[int],
    caches: Sequence[Any] | None,
    sampler: Sampler = greedy,
    *,
    offset: int = 0,
    chunk: int = PREFILL_CHUNK,
    after_pass: AfterPass | None = None,
) -> Iterator[tuple[int, float]]:
    """Yield ``(token, logprob)`` forever (the caller stops it). With ``caches=None`` every step recomputes the
    whole sequence from position 0 (the uncached oracle); ``offset`` must then be 0."""
    seq = list(prompt_ids)
    logits, _ = prefill(model, seq, caches, offset, chunk, after_pass)
    at = offset + len(seq)
    while True:
        token = sampler(logits)
        yield token, logprob(logits, token)
        seq.append(token)
        if caches is not None:
            out = model(tokens_for(model, [[token]], _cache_array(model, caches)), at, caches, logits_to_keep=1)
            if after_pass is not None:
                after_pass(model, caches)
        else:
            out = model(tokens_for(model, [seq]), 0, None, logits_to_keep=1)
        logits, at = last_logits(out)[0], at + 1
