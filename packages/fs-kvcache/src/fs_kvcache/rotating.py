"""``RotatingKVCache``: at most ``max_size`` positions per layer - the first ``keep``, then a sliding window.

mlx-lm's ``--max-kv-size`` cache, with the same visible set at every step. A one-token step sees the first
``keep`` positions and the most recent ``max_size - keep`` (its own included). A multi-token step (a prompt
chunk) is handed the first ``keep``, the most recent ``max_size - 1 - keep`` before it, and all of its own
tokens, and ``chunk_mask`` says which of those each query sees (causal, and a window of ``max_size``). Keys are
stored after RoPE, so dropping old positions needs no re-rotation, and ``offset`` keeps counting every position
ever fed (the next token's RoPE position).

Storage: one buffer ``[B, kv_heads, capacity, head_dim]`` whose first ``n`` slots are the visible positions.
Until it is full it is in temporal order; once it holds ``max_size``, each new token overwrites the oldest
window slot in place (a ring over slots ``keep .. max_size-1``, next write at ``_idx``), so a decode step costs
O(1), not a copy of the window. A one-token step attends without a mask, so the ring's order does not matter; a
multi-token step first puts the buffer back in temporal order (its causal mask needs it), appends, and may hold
more than ``max_size`` until the next one-token step trims back.

Until it first drops a position (``offset <= max_size``) the cache is a dense one: a chunk that fits needs no mask
beyond causal (``chunk_mask`` says None, and a model runs its dense-cache kernels, with their bits), and ``trim``
takes positions back (speculative decoding's rollback). After that, trimming would need positions already gone.
"""

from typing import Any

import numpy as np

from .arrays import concat, zeros
from .dense import _check_compatible, _check_pair
from .errors import KVCacheError

STEP = 256


def chunk_window(cache: Any, S: int) -> np.ndarray | None:
    """What a model asks before feeding S tokens to ``cache``: a rotating cache's ``chunk_mask`` where its window
    hides keys a causal mask would show, else None (one token, any other cache, a chunk the window holds whole)."""
    return cache.chunk_mask(S) if S > 1 and hasattr(cache, "chunk_mask") else None


class RotatingKVCache:
    def __init__(self, max_size: int, keep: int = 4):
        if type(max_size) is not int or type(keep) is not int or not 0 <= keep < max_size:
            raise KVCacheError(f"a rotating cache needs 0 <= keep < max_size, got keep={keep!r}, max_size={max_size!r}")
        self.max_size, self.keep = max_size, keep
        self._buf: tuple[Any, Any] | None = None
        self.n = 0  # visible positions: slots 0 .. n-1
        self._idx = keep  # next ring write; == keep whenever the slots are in temporal order
        self.offset = 0  # positions fed so far

    def chunk_mask(self, S: int) -> np.ndarray | None:
        """Asked before a multi-token update: which keys each of the S new queries may see, ``[S, n_old + S]``
        over the keys that update returns (``n_old`` kept positions, then the S new). mlx-lm's windowed causal
        mask: query i sees key j when j <= n_old + i and j > n_old + i - max_size - the window slides over the
        chunk too, and past ``max_size`` the kept first positions drop out of it. None when the window hides
        nothing a causal mask shows (the chunk fits: ``n + S <= max_size``)."""
        if self.n + S <= self.max_size:
            return None
        n_old = min(self.n, self.max_size - 1)
        i, j = np.arange(S)[:, None] + n_old, np.arange(n_old + S)[None]
        return (j <= i) & (j > i - self.max_size)

    @property
    def key_values(self) -> tuple[Any, Any] | None:
        """The visible (K, V) in temporal order, or None before the first update."""
        if self._buf is None or not self.n:
            return None
        return self._temporal()

    def update_and_fetch(self, keys: Any, values: Any) -> tuple[Any, Any]:
        self._update(keys, values)
        assert self._buf is not None
        return self._buf[0][:, :, : self.n], self._buf[1][:, :, : self.n]

    def update_and_fetch_buffers(self, keys: Any, values: Any) -> tuple[Any, Any, int]:
        """As ``DenseKVCache``'s: the buffers and the count of visible slots at their start."""
        self._update(keys, values)
        assert self._buf is not None
        return self._buf[0], self._buf[1], self.n

    def trim(self, n: int) -> int:
        """Forget the last ``n`` positions, while the cache has dropped none (``offset == `` its visible count):
        then it holds them in temporal order and what is left is what the cache held before they were fed."""
        if type(n) is not int or n < 0 or n > self.n:
            raise KVCacheError(f"cannot trim {n!r} positions from a rotating cache holding {self.n}")
        if n and self.offset != self.n:
            raise KVCacheError(
                f"a rotating cache that has dropped positions (offset {self.offset}, {self.n} visible) cannot be"
                " trimmed: the positions before the trimmed ones are gone"
            )
        self.n -= n
        self.offset -= n
        return n

    def _update(self, keys: Any, values: Any) -> None:
        _check_pair(keys, values)
        if self._buf is not None:
            _check_compatible(self._buf[:1], (keys,))
        S = keys.shape[2]
        if S == 1:
            self._step(keys, values)
        else:
            self._chunk(keys, values)
        self.offset += S

    def _step(self, k: Any, v: Any) -> None:
        if self.n > self.max_size:  # after a chunk: back to max_size (the oldest window positions go)
            self._linear(self._temporal(), drop=self.n - self.max_size)
        if self.n < self.max_size:
            self._reserve(k, self.n + 1)
            at = self.n
            self.n += 1
        else:  # full: overwrite the oldest window slot
            at = self._idx
            self._idx = self.keep + (self._idx - self.keep + 1) % (self.max_size - self.keep)
        assert self._buf is not None
        self._buf[0][:, :, at : at + 1] = k
        self._buf[1][:, :, at : at + 1] = v

    def _chunk(self, k: Any, v: Any) -> None:
        held = self._temporal() if self._buf is not None and self.n else None
        drop = max(0, self.n - (self.max_size - 1))
        if held is None:
            self._buf, self.n = None, 0
            self._reserve(k, k.shape[2])
        else:
            self._linear(held, drop=drop, extra=k.shape[2])
        assert self._buf is not None
        a, S = self.n, k.shape[2]
        self._buf[0][:, :, a : a + S] = k
        self._buf[1][:, :, a : a + S] = v
        self.n += S

    def _temporal(self) -> tuple[Any, Any]:
        assert self._buf is not None
        n, i, keep = self.n, self._idx, self.keep
        if i == keep:
            return self._buf[0][:, :, :n], self._buf[1][:, :, :n]
        return tuple(  # type: ignore[return-value]
            concat(b, [b[:, :, :keep], b[:, :, i:n], b[:, :, keep:i]], axis=2) for b in self._buf
        )

    def _linear(self, held: tuple[Any, Any], *, drop: int, extra: int = 0) -> None:
        """Rewrite the buffer in temporal order without the ``drop`` oldest window positions, with room for
        ``extra`` more."""
        k, v = held
        keep = min(self.keep, self.n)
        parts = [(x[:, :, :keep], x[:, :, keep + drop :]) for x in (k, v)]
        n = self.n - drop
        B, H, _, D = k.shape
        cap = -(-(n + extra) // STEP) * STEP
        bk, bv = zeros(k, (B, H, cap, D)), zeros(k, (B, H, cap, D))
        for buf, (head, tail) in zip((bk, bv), parts, strict=True):
            buf[:, :, :keep] = head
            buf[:, :, keep:n] = tail
        self._buf, self.n, self._idx = (bk, bv), n, self.keep

    def _reserve(self, like: Any, needed: int) -> None:
        """Capacity for ``needed`` slots in temporal order (growth happens only before the ring is full)."""
        cap = self._buf[0].shape[2] if self._buf is not None else 0
        if needed <= cap:
            return
        B, H, _, D = like.shape
        new = min(max(needed, 2 * cap, STEP), max(needed, self.max_size))
        bk, bv = zeros(like, (B, H, new, D)), zeros(like, (B, H, new, D))
        if self._buf is not None and self.n:
            bk[:, :, : self.n] = self._buf[0][:, :, : self.n]
            bv[:, :, : self.n] = self._buf[1][:, :, : self.n]
        self._buf = (bk, bv)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self._buf) if self._buf is not None else 0

    def __repr__(self) -> str:
        return f"RotatingKVCache(offset={self.offset}, visible={self.n}, max_size={self.max_size}, keep={self.keep})"
