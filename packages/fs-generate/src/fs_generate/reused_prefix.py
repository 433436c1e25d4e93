"""A prompt prefix whose K/V is already computed - from a prompt-cache file or the previous chat turn.

``KVPrefix(tokens, state)`` is what ``Generator(prefix_cache=...)`` asks: ``match(ids)`` gives the longest prefix
of ``ids`` it holds and that prefix's per-layer ``(K [B, H, n, D], V)``; the generator then prefills only the
rest. Its arrays are never written: a cache built on them copies them before its first update.

``save_prompt`` / ``load_prompt`` are ``fs-cache-prompt`` and ``fs-generate --prompt-cache-file`` (mlx-lm's
pair) on fs-kvcache's prompt-cache files. A file names the weights, the tokenizer and the K/V dtype it was made
with; another model (or ``--dtype``) refuses it with an error instead of generating from foreign K/V.
"""

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fs_kvcache import identity_string, load_prompt_cache, save_prompt_cache
from fs_model import CausalLM

from .errors import GenerateError
from .step import PREFILL_CHUNK, tokens_for

State = list[tuple[Any, Any]]


class KVPrefix:
    def __init__(self, tokens: Sequence[int], state: State):
        if any(k.shape[2] != len(tokens) for k, _ in state):
            raise GenerateError(f"a reused prefix must hold exactly its {len(tokens)} positions in every layer")
        self.tokens, self.state = list(tokens), state

    def match(self, ids: Sequence[int]) -> tuple[int, State | None]:
        n = 0
        for a, b in zip(self.tokens, ids, strict=False):
            if a != b:
                break
            n += 1
        if n == 0:
            return 0, None
        if n == len(self.tokens):
            return n, self.state
        return n, [(k[:, :, :n], v[:, :, :n]) for k, v in self.state]

    def insert(self, ids: Sequence[int], state: State) -> None:
        """The generator offers its prompt's K/V back; a fixed prefix keeps what it has."""


def kv_identity(model: CausalLM, tokenizer: Any) -> str:
    """What saved K/V is valid for: these weights, this tokenizer, this K/V dtype."""
    kv = getattr(model, "kv_dtype", None) or str(getattr(model, "dtype", ""))
    weights = getattr(model, "weights_digest", "") or getattr(model, "path", "")
    return identity_string(weights=weights, tokenizer=getattr(tokenizer, "digest", ""), kv_dtype=kv)


def prefill_state(model: CausalLM, ids: Sequence[int], progress: Callable[[int, int], None] | None = None) -> State:
    """Each layer's ``(K, V)`` after feeding ``ids`` from position 0, ``PREFILL_CHUNK`` tokens per pass (as
    ``generate`` prefills, so a saved prompt equals the one generation would have built)."""
    caches = model.make_cache()
    ids = list(ids)
    for at in range(0, len(ids), PREFILL_CHUNK):
        like = caches[0].key_values[0] if at else None
        model(tokens_for(model, [ids[at : at + PREFILL_CHUNK]], like), at, caches, logits_to_keep=1)
        if progress is not None:
            progress(min(at + PREFILL_CHUNK, len(ids)), len(ids))
    return [c.key_values for c in caches]


def save_prompt(
    path: str | os.PathLike[str], model: CausalLM, tokenizer: Any, ids: Sequence[int], state: State
) -> None:
    save_prompt_cache(path, list(ids), state, kv_identity(model, tokenizer))


def load_prompt(path: str | os.PathLike[str], model: CausalLM, tokenizer: Any) -> KVPrefix:
    tokens, layers, _ = load_prompt_cache(path, kv_identity(model, tokenizer))
    if len(layers) != model.config.num_hidden_layers:
        raise GenerateError(f"{path}: {len(layers)} layers, the model has {model.config.num_hidden_layers}")
    if tokens and max(tokens) >= model.config.vocab_size:
        raise GenerateError(f"{path}: token id {max(tokens)} is outside the model's {model.config.vocab_size} ids")
    if getattr(model, "backend", "") == "mlx":
        layers = [(_mlx(k), _mlx(v)) for k, v in layers]
    return KVPrefix(tokens, layers)


def _mlx(x: np.ndarray) -> Any:
    import mlx.core as mx

    return mx.array(x).view(mx.bfloat16) if x.dtype == np.uint16 else mx.array(x)
