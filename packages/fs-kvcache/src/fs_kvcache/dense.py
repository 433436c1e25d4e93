"""``DenseKVCache``: one layer's keys and values, grown in place, forkable without copying the prefix.

K/V are ``[B, kv_heads, S, head_dim]``. The cache owns a buffer with spare capacity (doubling, so a decoded token
costs O(1) amortised, never a copy of the whole history) and hands out *views* ``buf[:, :, :offset]`` - new
objects on every update. Positions that someone else may be looking at are *frozen*: the first ``offset``
positions at a ``fork()`` (the child sees them) and everything below the old offset after a ``trim()`` (earlier
views show it). A write that would land in a frozen position moves the cache to a fresh buffer first, so a
frozen prefix and a sibling's arrays are never modified.
"""

from typing import Any

from .arrays import evaluate, zeros
from .errors import KVCacheError

STEP = 256


class DenseKVCache:
    def __init__(self, key_values: tuple[Any, Any] | None = None):
        self._kv: tuple[Any, Any] | None = None
        self._buf: tuple[Any, Any] | None = None  # owned storage, or None while sharing someone's arrays
        self._frozen = 0
        self.offset = 0
        if key_values is not None:
            k, v = key_values
            _check_pair(k, v)
            self._kv, self.offset = (k, v), k.shape[2]

    @property
    def key_values(self) -> tuple[Any, Any] | None:
        """(K, V) for positions 0..offset-1, or None before the first update."""
        return self._kv if self.offset else None

    def update_and_fetch(self, keys: Any, values: Any) -> tuple[Any, Any]:
        _check_pair(keys, values)
        if self._kv is not None:
            _check_compatible(self._kv[0], keys)
        start, end = self.offset, self.offset + keys.shape[2]
        if self._buf is None or start < self._frozen or end > self._buf[0].shape[2]:
            self._reallocate(keys, end)
        assert self._buf is not None
        bk, bv = self._buf
        bk[:, :, start:end] = keys
        bv[:, :, start:end] = values
        self.offset = end
        self._kv = (bk[:, :, :end], bv[:, :, :end])
        return self._kv

    def update_and_fetch_buffers(self, keys: Any, values: Any) -> tuple[Any, Any, int]:
        """``update_and_fetch``, returning instead the cache's own contiguous buffers ``[B, kv_heads, capacity,
        head_dim]`` and ``offset``: positions 0..offset-1 are the history, the rest is spare capacity. A kernel
        reads the history in place from them (a compiled loop over a strided view is slower, a copy is O(T))."""
        self.update_and_fetch(keys, values)
        assert self._buf is not None
        return self._buf[0], self._buf[1], self.offset

    def _reallocate(self, like: Any, needed: int) -> None:
        old = self._buf[0].shape[2] if self._buf is not None else 0
        cap = max(needed + needed // 4, 2 * old, STEP)  # headroom: a prefill is followed by decode steps
        cap = -(-cap // STEP) * STEP
        B, H, _, D = like.shape
        bk, bv = zeros(like, (B, H, cap, D)), zeros(like, (B, H, cap, D))
        if self.offset:
            assert self._kv is not None
            bk[:, :, : self.offset] = self._kv[0][:, :, : self.offset]
            bv[:, :, : self.offset] = self._kv[1][:, :, : self.offset]
        self._buf, self._frozen = (bk, bv), 0

    def trim(self, n: int) -> int:
        """Forget the last ``n`` positions; arrays handed out before keep showing them."""
        if type(n) is not int or n < 0 or n > self.offset:
            raise KVCacheError(f"cannot trim {n!r} positions from a cache holding {self.offset}")
        self._frozen = max(self._frozen, self.offset)
        self.offset -= n
        if self._kv is not None:
            self._kv = (self._kv[0][:, :, : self.offset], self._kv[1][:, :, : self.offset])
        return n

    def fork(self) -> "DenseKVCache":
        """A new cache whose ``key_values`` are this cache's arrays themselves; both may grow independently."""
        child = DenseKVCache()
        child._kv, child.offset = self._kv, self.offset
        self._frozen = max(self._frozen, self.offset)
        return child

    def materialize(self) -> tuple[Any, Any] | None:
        """Force evaluation (MLX is lazy) and return ``key_values``."""
        if self._kv is not None:
            evaluate(*self._kv)
        return self.key_values

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self._buf) if self._buf is not None else 0

    def __repr__(self) -> str:
        return f"DenseKVCache(offset={self.offset})"


def _check_pair(k: Any, v: Any) -> None:
    if len(k.shape) != 4 or tuple(k.shape) != tuple(v.shape):
        raise KVCacheError(f"keys {tuple(k.shape)} and values {tuple(v.shape)} must both be [B, kv_heads, S, head_dim]")
    if k.dtype != v.dtype:
        raise KVCacheError(f"keys are {k.dtype} but values are {v.dtype}")


def _check_compatible(held: Any, new: Any) -> None:
    a, b = tuple(held.shape), tuple(new.shape)
    if (a[0], a[1], a[3]) != (b[0], b[1], b[3]) or held.dtype != new.dtype:
        raise KVCacheError(
            f"cannot append {b} {new.dtype} to a cache holding {a} {held.dtype}: "
            "batch, kv_heads, head_dim and dtype must match"
        )
