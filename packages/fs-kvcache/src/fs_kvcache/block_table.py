"""``BlockTable``: which blocks of a ``BlockPool`` hold one sequence's positions, and nothing about the numbers.

Position ``p`` lives in block ``blocks[p // bs]`` at row ``p % bs`` - its *slot* is ``blocks[p // bs] * bs + p % bs``.
The table owns one reference on each of its blocks. Full blocks may be shared with other sequences (forks, the
prefix cache); the partly filled last block is copied before a write when another holder shares it (copy-on-write).
Copying the numbers is the storage's job: ``reserve`` calls ``copy(src, dst)`` for each block it splits off.

    table = BlockTable(pool)            # or BlockTable(pool, prefix, blocks=prefix.lookup(prompt))
    table.reserve(S, copy)              # room for S more positions (refused whole, before anything changes)
    slots = table.slots(table.length, S)   # where the S new positions' K/V go
    table.advance(S)
    table.release()                     # every reference back, exactly once

Each new block is the one right after the table's last where that is free (``BlockPool.allocate``); ``run``: a
fresh block starts a free, run-aligned run of that many, room to grow side by side. The engine passes its
attention's tile.

Shared by ``PagedKVCache`` (one layer, its own storage) and the engine (every layer, ``KVStore``).
"""

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .errors import KVCacheError


class BlockTable:
    def __init__(self, pool: Any, prefix: Any = None, blocks: Iterable[int] = (), run: int = 1):
        """``blocks``: full blocks the caller holds a reference on each of (they become this table's)."""
        if type(run) is not int or run < 1:
            raise KVCacheError(f"run must be a positive int, got {run!r}")
        self.pool, self.prefix, self.run = pool, prefix, run
        self.blocks = list(blocks)
        for b in self.blocks:
            if not 0 <= b < pool.num_blocks or pool.refs[b] < 1:
                raise KVCacheError(f"block {b} is not a live block of this pool")
        self.length = len(self.blocks) * pool.block_size
        self.released = False

    def _live(self) -> None:
        if self.released:
            raise KVCacheError("this block table was released; it cannot be used again")

    def needed(self, n: int) -> int:
        """Blocks ``reserve(n)`` would allocate: new blocks past the table's end, plus a shared partial tail's copy."""
        bs = self.pool.block_size
        new = max(0, -(-(self.length + n) // bs) - len(self.blocks))
        tail = self.length % bs != 0 and self.pool.refs[self.blocks[self.length // bs]] > 1
        return new + int(tail and n > 0)

    def available(self) -> int:
        """Blocks a reserve can get: the pool's free ones, and with a prefix cache the ones only it holds."""
        return self.pool.free_blocks + (self.prefix.cached_blocks if self.prefix is not None else 0)

    def reserve(self, n: int, copy: Callable[[int, int], None]) -> None:
        """Make positions ``length .. length+n-1`` writable: allocate missing blocks, copy a shared partial tail."""
        self._live()
        needed = self.needed(n)
        if needed > self.available():  # refuse before touching anything
            raise KVCacheError(
                f"block pool exhausted: {needed} more blocks needed, {self.available()} free or evictable of "
                f"{self.pool.num_blocks} (raise num_blocks or release sequences)"
            )
        allocate = self.prefix.allocate if self.prefix is not None else self.pool.allocate
        bs = self.pool.block_size
        if n > 0 and self.length % bs:
            i = self.length // bs
            if self.pool.refs[self.blocks[i]] > 1:
                new = allocate()
                copy(self.blocks[i], new)
                self.pool.decref(self.blocks[i])
                self.blocks[i] = new
        while len(self.blocks) * bs < self.length + n:
            self.blocks.append(allocate(self.blocks[-1] if self.blocks else None, self.run))

    def slots(self, start: int, n: int) -> np.ndarray:
        """Slots of positions ``start .. start+n-1`` (int64 [n]); they must be reserved."""
        p = np.arange(start, start + n, dtype=np.int64)
        bs = self.pool.block_size
        if n and (start < 0 or -(-(start + n) // bs) > len(self.blocks)):
            raise KVCacheError(f"positions {start}..{start + n - 1} are not reserved ({len(self.blocks)} blocks)")
        return np.asarray(self.blocks, dtype=np.int64)[p // bs] * bs + p % bs

    def advance(self, n: int) -> None:
        """Positions up to ``length + n`` now hold K/V."""
        if len(self.blocks) * self.pool.block_size < self.length + n:
            raise KVCacheError(f"cannot advance {n} positions past the reserved {len(self.blocks)} blocks")
        self.length += n

    def trim(self, n: int) -> int:
        """Forget the last ``n`` positions; blocks no position uses any more go back."""
        self._live()
        if type(n) is not int or n < 0 or n > self.length:
            raise KVCacheError(f"cannot trim {n!r} positions from a sequence holding {self.length}")
        self.length -= n
        keep = -(-self.length // self.pool.block_size)
        for b in reversed(self.blocks[keep:]):  # last first: the pool hands them out again in their order
            self.pool.decref(b)
        del self.blocks[keep:]
        return n

    def fork(self) -> "BlockTable":
        """A second table over the same blocks (one more reference on each); either may grow independently."""
        self._live()
        for b in self.blocks:
            self.pool.incref(b)
        child = BlockTable(self.pool, self.prefix, self.blocks, self.run)
        child.length = self.length
        return child

    def release(self) -> None:
        """Return every reference; exactly once."""
        self._live()
        for b in reversed(self.blocks):  # last first: the pool's free stack hands them out again in their order
            self.pool.decref(b)
        self.blocks, self.length, self.released = [], 0, True
