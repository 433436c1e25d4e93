"""What every backend shares: the call contract, input validation and cache construction.

``model(tokens [B, S], offset, caches, logits_to_keep=None) -> logits [B, S', V]`` (mlx-lm / tiny-llm style)
and ``model.forward(ids [S], cache=None) -> logits [S, V]``. Inputs are checked here, before any compute.
``CausalLM`` states the contract as a Protocol: what fs-generate, fs-agent and their test doubles rely on.
"""

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from fs_kvcache import KV_BITS, BlockPool, DenseKVCache, PagedKVCache, QuantizedKVCache, RotatingKVCache
from fs_weights import Qwen3Config

from .errors import ModelError


class CausalLM(Protocol):
    """A causal language model as the layers above use it. ``tokens`` is ``tokens_array(ids)`` (numpy int64 or
    mx.array int32, [B, S]); ``caches`` one per layer from ``make_cache()``, all at ``offset``; ``pad[b]`` left
    padding of row b. Returns logits [B, S or logits_to_keep, V] in the backend's array type."""

    config: Qwen3Config

    @property
    def vocab_size(self) -> int: ...

    def __call__(
        self,
        tokens: Any,
        offset: int = 0,
        caches: Sequence[Any] | None = None,
        logits_to_keep: int | None = None,
        pad: Sequence[int] | None = None,
    ) -> Any: ...

    def make_cache(self) -> list[Any]: ...

    def last_hidden(self, tokens: Any, pad: Sequence[int] | None = None) -> Any: ...

    def tokens_array(self, ids: Sequence[int] | Sequence[Sequence[int]]) -> Any: ...

    def to_numpy(self, x: Any) -> Any: ...


class Model:
    backend = "base"
    # True where a row's logits are the same bits whatever else is in the call - other sequences, more tokens of
    # its own (a prefill chunk, k drafted tokens being verified): what lossless speculative decoding relies on
    batch_invariant = False

    def __init__(self, config: Qwen3Config, path: str = "<memory>"):
        self.config = config
        self.path = path
        self.n_layers = config.num_hidden_layers
        eos = config.eos_token_id
        # the ids that end generation: config.json's, and generation_config.json's (added by load_model)
        self.eos_token_ids = frozenset(eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else [])
        # what these weights are (Checkpoint.digest, set by load_model): saved KV state names it, and is refused
        # by a model with other weights of the same shapes
        self.weights_digest = ""

    # --- the contract ---------------------------------------------------------------------------------------

    def __call__(
        self,
        tokens: Any,
        offset: int = 0,
        caches: Sequence[Any] | None = None,
        logits_to_keep: int | None = None,
        pad: Sequence[int] | None = None,
    ) -> Any:
        """``pad[b]`` (optional): row b is left-padded by that many cache positions, which no query sees and which
        do not count as positions - how prompts of different lengths share one batch."""
        self._check(tokens, offset, caches, logits_to_keep, pad)
        if pad is None:
            return self._run(tokens, offset, caches, logits_to_keep, None)
        return self._run(tokens, offset, caches, logits_to_keep, None, pad=np.asarray(pad, dtype=np.int64))

    def forward(self, token_ids: Any, cache: Sequence[Any] | None = None) -> Any:
        """Logits ``[S, V]`` for the new tokens at positions ``cache.offset ...`` (0 without a cache)."""
        ids = self._as_ids(token_ids)
        offset = 0 if not cache else int(cache[0].offset)
        return self(self.tokens_array(ids), offset, cache)[0]

    def trace(self, token_ids: Any) -> dict[str, np.ndarray]:
        """Named float32 activations: ``embedding [S,H]``, ``block.{i} [S,H]``, ``final_norm [S,H]``,
        ``logits [S,V]`` (batch axis dropped)."""
        ids = self._as_ids(token_ids)
        tokens = self.tokens_array(ids)
        self._check(tokens, 0, None, None)
        out: dict[str, Any] = {}
        self._run(tokens, 0, None, None, out)
        return {k: np.asarray(self.to_numpy(v))[0] for k, v in out.items()}

    def last_hidden(self, tokens: Any, pad: Sequence[int] | None = None) -> np.ndarray:
        """The final norm's output at each row's last position, float32 ``[B, H]``: what an embedding model
        (Qwen3-Embedding) pools. ``pad[b]``: row b's left padding, as in ``__call__``."""
        self._check(tokens, 0, None, 1, pad)
        out: dict[str, Any] = {}
        self._run(tokens, 0, None, 1, out, **({} if pad is None else {"pad": np.asarray(pad, dtype=np.int64)}))
        return np.asarray(self.to_numpy(out["final_norm"]), dtype=np.float32)[:, -1]

    def make_cache(
        self,
        kind: str = "dense",
        *,
        num_blocks: int = 1024,
        block_size: int = 16,
        max_size: int = 0,
        keep: int = 4,
        bits: int = 8,
        group_size: int = 64,
    ) -> list[Any]:
        """One cache per layer: ``dense`` (growable, forkable), ``quantized`` (dense, K/V as ``bits``-bit affine
        codes: mlx-lm's ``--kv-bits``), ``paged`` (a block pool per layer) or ``rotating`` (the first ``keep``
        positions and a sliding window, ``max_size`` in all: mlx-lm's ``--max-kv-size``)."""
        if kind == "dense":
            return [DenseKVCache() for _ in range(self.n_layers)]
        if kind == "quantized":
            self._check_kv_quantization(bits, group_size)
            return [QuantizedKVCache(bits, group_size) for _ in range(self.n_layers)]
        if kind == "rotating":
            return [RotatingKVCache(max_size, keep) for _ in range(self.n_layers)]
        if kind == "paged":
            return [PagedKVCache(BlockPool(num_blocks, block_size)) for _ in range(self.n_layers)]
        raise ModelError(f"unknown cache kind {kind!r} (choose 'dense', 'paged' or 'rotating')")

    def quantize_cache(self, cache: DenseKVCache, bits: int, group_size: int) -> QuantizedKVCache:
        """mlx-lm's ``to_quantized``: a quantized cache holding ``cache``'s positions, each quantized as it would
        have been when written (quantization is per position, so converting late changes no position's codes)."""
        self._check_kv_quantization(bits, group_size)
        kv = cache.key_values
        if kv is None:
            return QuantizedKVCache(bits, group_size)
        k, v = (self._quantize_kv(x, bits, group_size) for x in kv)
        return QuantizedKVCache(bits, group_size, key_values=(k, v))

    def _check_kv_quantization(self, bits: int, group_size: int) -> None:
        D = self.config.dim_head
        if bits not in KV_BITS:
            raise ModelError(f"kv bits must be one of {KV_BITS}, got {bits!r}")
        if type(group_size) is not int or group_size <= 0 or D % group_size or group_size % (32 // bits):
            raise ModelError(
                f"kv group size {group_size!r} must divide head_dim {D} and be a multiple of {32 // bits}"
                f" at {bits} bits (mlx-lm's are 32, 64 and 128)"
            )

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    # --- validation -----------------------------------------------------------------------------------------

    def _as_ids(self, token_ids: Any) -> list[int]:
        if isinstance(token_ids, (str, bytes)):
            raise ModelError(f"token ids must be integers, got {type(token_ids).__name__}; tokenize first")
        ids = np.asarray(self.to_numpy(token_ids))
        if ids.ndim != 1:
            raise ModelError(f"forward expects a 1-D sequence of token ids, got shape {ids.shape}")
        if ids.size and ids.dtype.kind not in "iu":
            raise ModelError(f"token ids must be integers, got dtype {ids.dtype}")
        return ids.tolist()

    def _check(
        self, tokens: Any, offset: int, caches: Sequence[Any] | None, keep: int | None, pad: Sequence[int] | None = None
    ) -> None:
        arr = np.asarray(self.to_numpy(tokens))
        if arr.ndim != 2:
            raise ModelError(f"tokens must be [B, S], got shape {arr.shape}")
        B, S = arr.shape
        if S == 0 or B == 0:
            raise ModelError("empty input: at least one token is needed")
        if arr.dtype.kind not in "iu":
            raise ModelError(f"token ids must be integers, got dtype {arr.dtype}")
        bad = np.flatnonzero((arr < 0) | (arr >= self.vocab_size))
        if bad.size:
            b, s = divmod(int(bad[0]), S)
            raise ModelError(
                f"token id {int(arr[b, s])} at position {s} (batch row {b}) is out of range [0, {self.vocab_size})"
            )
        if (type(offset) is not int and not isinstance(offset, np.integer)) or offset < 0:
            raise ModelError(f"offset must be a non-negative int, got {offset!r}")
        shift = 0
        if pad is not None:
            if len(pad) != B or not all(type(p) is int and 0 <= p <= offset + S for p in pad):
                raise ModelError(f"pad must be {B} ints in [0, {offset + S}], got {list(pad)!r}")
            shift = min(pad)
        if offset + S - shift > self.config.max_position_embeddings:
            raise ModelError(
                f"positions {offset}..{offset + S - 1} exceed max_position_embeddings "
                f"{self.config.max_position_embeddings}"
            )
        if caches is not None:
            if len(caches) != self.n_layers:
                raise ModelError(f"got {len(caches)} caches for {self.n_layers} layers")
            if any(int(c.offset) != offset for c in caches):
                raise ModelError(
                    f"offset {offset} does not match the caches' offsets {sorted({int(c.offset) for c in caches})}"
                )
        if keep is not None and (type(keep) is not int or keep < 1):
            raise ModelError(f"logits_to_keep must be a positive int or None, got {keep!r}")

    # --- backend hooks --------------------------------------------------------------------------------------

    def tokens_array(self, ids: Sequence[int] | Sequence[Sequence[int]]) -> Any:
        """IDs as this backend's [B, S] token array (a flat list becomes one row)."""
        rows = [list(ids)] if not ids or not isinstance(ids[0], Sequence) else ids
        return np.asarray(rows, dtype=np.int64)

    def to_numpy(self, x: Any) -> Any:
        """A backend array as numpy (float32 for bf16), anything else unchanged."""
        return x

    def _quantize_kv(self, x: Any, bits: int, group_size: int) -> tuple[Any, Any, Any]:
        """Cached K or V [B, kv_heads, S, D] as this backend's affine triple (codes, scales, biases)."""
        raise NotImplementedError

    def _run(
        self,
        tokens: Any,
        offset: int,
        caches: Sequence[Any] | None,
        keep: int | None,
        trace: dict[str, Any] | None,
        pad: np.ndarray | None = None,
    ) -> Any:
        raise NotImplementedError
