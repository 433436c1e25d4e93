"""``DenseKVCache``: one layer's keys and values, grown in place, forkable without copying the prefix.

K/V are ``[B, kv_heads, S, head_dim]``. The cache owns a buffer with spare capacity (doubling, so a decoded token
costs O(1) amortised, never a copy of the whole history) and hands out *views* ``buf[:, :, :offset]`` - new
objects on every update. Positions that someone else may be looking at are *frozen*: the first ``offset``
positions at a ``fork()`` (the child sees them) and, after a ``trim()``, every position a view handed out before
shows (``update_and_fetch``, ``key_values``). A write that would land in a frozen position moves the cache to a
fresh buffer (of the same capacity) first, so a frozen prefix and a sibling's arrays are never modified. The fused
kernels' ``update_and_fetch_buffers`` reads the buffers in place during its call and keeps nothing, so a trim after
it (speculative decoding's rollback of rejected drafts, every pass) costs no copy.

Internally a cache holds *parts*: arrays ``[B, kv_heads, S, *]`` that grow together along S - here (K, V); a
``QuantizedKVCache`` (quantized.py) holds three per side, the same growth and freezing rules applied to all six.
"""

from typing import Any

from .arrays import evaluate, zeros
from .errors import KVCacheError

STEP = 256


class DenseKVCache:
    def __init__(self, key_values: tuple[Any, Any] | None = None):
        self._parts: tuple[Any, ...] | None = None  # views of positions 0..offset-1
        self._buf: tuple[Any, ...] | None = None  # owned storage, or None while sharing someone's arrays
        self._frozen = 0
        self._shown = 0  # positions of the current buffer some handed-out view shows
        self.offset = 0
        if key_values is not None:
            self._parts = self._join(*key_values)
            self.offset = self._parts[0].shape[2]

    # --- what a side is: one array (here) or several (quantized.py) -------------------------------------------

    def _join(self, keys: Any, values: Any) -> tuple[Any, ...]:
        _check_pair(keys, values)
        return keys, values

    def _split(self, parts: tuple[Any, ...]) -> tuple[Any, Any]:
        return parts[0], parts[1]

    # --- the cache --------------------------------------------------------------------------------------------

    @property
    def key_values(self) -> tuple[Any, Any] | None:
        """(K, V) for positions 0..offset-1, or None before the first update."""
        if self._parts is None or not self.offset:
            return None
        self._shown = max(self._shown, self.offset)
        return self._split(self._parts)

    def update_and_fetch(self, keys: Any, values: Any) -> tuple[Any, Any]:
        self._write(keys, values)
        assert self._parts is not None
        self._shown = max(self._shown, self.offset)
        return self._split(self._parts)

    def _write(self, keys: Any, values: Any) -> None:
        new = self._join(keys, values)
        if self._parts is not None:
            _check_compatible(self._parts, new)
        start, end = self.offset, self.offset + new[0].shape[2]
        if self._buf is None or start < self._frozen or end > self._buf[0].shape[2]:
            self._reallocate(new, end)
        assert self._buf is not None
        for b, x in zip(self._buf, new, strict=True):
            b[:, :, start:end] = x
        self.offset = end
        self._parts = tuple(b[:, :, :end] for b in self._buf)

    def update_and_fetch_buffers(self, keys: Any, values: Any) -> tuple[Any, Any, int]:
        """``update_and_fetch``, returning instead the cache's own contiguous buffers ``[B, kv_heads, capacity,
        head_dim]`` and ``offset``: positions 0..offset-1 are the history, the rest is spare capacity. A kernel
        reads the history in place from them (a compiled loop over a strided view is slower, a copy is O(T)) and
        keeps nothing: they count as shown to no one."""
        self._write(keys, values)
        assert self._buf is not None
        return (*self._split(self._buf), self.offset)

    def _reallocate(self, like: tuple[Any, ...], needed: int) -> None:
        old = self._buf[0].shape[2] if self._buf is not None else 0
        # headroom: a prefill is followed by decode steps; doubling only when it is too small (a move away from a
        # frozen prefix keeps the capacity)
        cap = max(needed + needed // 4, 2 * old, STEP) if needed > old else old
        cap = -(-cap // STEP) * STEP
        bufs = tuple(zeros(x, (x.shape[0], x.shape[1], cap, x.shape[3])) for x in like)
        if self.offset:
            assert self._parts is not None
            for b, x in zip(bufs, self._parts, strict=True):
                b[:, :, : self.offset] = x[:, :, : self.offset]
        self._buf, self._frozen, self._shown = bufs, 0, 0

    def trim(self, n: int) -> int:
        """Forget the last ``n`` positions; arrays handed out before keep showing them."""
        if type(n) is not int or n < 0 or n > self.offset:
            raise KVCacheError(f"cannot trim {n!r} positions from a cache holding {self.offset}")
        self._frozen = max(self._frozen, min(self._shown, self.offset))
        self.offset -= n
        if self._parts is not None:
            self._parts = tuple(x[:, :, : self.offset] for x in self._parts)
        return n

    def fork(self) -> "DenseKVCache":
        """A new cache whose ``key_values`` are this cache's arrays themselves; both may grow independently."""
        child = self._empty()
        child._parts, child.offset = self._parts, self.offset
        self._frozen = max(self._frozen, self.offset)
        return child

    def _empty(self) -> "DenseKVCache":
        return DenseKVCache()

    def materialize(self) -> tuple[Any, Any] | None:
        """Force evaluation (MLX is lazy) and return ``key_values``."""
        if self._parts is not None:
            evaluate(*self._parts)
        return self.key_values

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self._buf) if self._buf is not None else 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(offset={self.offset})"


def _check_pair(k: Any, v: Any) -> None:
    if len(k.shape) != 4 or tuple(k.shape) != tuple(v.shape):
        raise KVCacheError(f"keys {tuple(k.shape)} and values {tuple(v.shape)} must both be [B, kv_heads, S, head_dim]")
    if k.dtype != v.dtype:
        raise KVCacheError(f"keys are {k.dtype} but values are {v.dtype}")


def _check_compatible(held: tuple[Any, ...], new: tuple[Any, ...]) -> None:
    for h, x in zip(held, new, strict=True):
        a, b = tuple(h.shape), tuple(x.shape)
        if (a[0], a[1], a[3]) != (b[0], b[1], b[3]) or h.dtype != x.dtype:
            raise KVCacheError(
                f"cannot append {b} {x.dtype} to a cache holding {a} {h.dtype}: "
                "batch, kv_heads, head_dim and dtype must match"
            )
