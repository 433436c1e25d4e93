"""``PagedKVCache``: one sequence's keys and values in fixed-size blocks of a shared ``BlockPool``.

A block table maps the sequence's positions to pool blocks (position p lives in block ``table[p // bs]`` at row
``p % bs``). Forks share blocks by reference count; writing into a shared, partly filled block copies it first
(copy-on-write). Attention reads through the table: ``key_values`` gathers the blocks into ``[1, H, offset, D]``.
"""

from itertools import islice
from typing import Any

from .arrays import evaluate, index, zeros
from .block_table import BlockTable
from .dense import _check_pair
from .errors import KVCacheError


class BlockPool:
    """Fixed-size blocks with reference counts, storage allocated on first use, a hard budget of ``num_blocks``."""

    def __init__(self, num_blocks: int = 1024, block_size: int = 16):
        if type(num_blocks) is not int or num_blocks < 1 or type(block_size) is not int or block_size < 1:
            raise KVCacheError(f"num_blocks and block_size must be positive ints, got {num_blocks!r}, {block_size!r}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.refs = [0] * num_blocks
        # a stack, lowest id on top: a sequence's blocks come out in increasing order, often side by side in memory,
        # which attention reads as one run (fs-model's cpu/attention.py); tables free theirs last first to keep it so
        self._free = list(range(num_blocks - 1, -1, -1))
        self.k: Any = None
        self.v: Any = None

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def storage_for(self, like: Any) -> None:
        _, H, _, D = like.shape
        if self.k is None:
            self.k = zeros(like, (self.num_blocks, H, self.block_size, D))
            self.v = zeros(like, (self.num_blocks, H, self.block_size, D))
        elif (self.k.shape[1], self.k.shape[3]) != (H, D) or self.k.dtype != like.dtype:
            raise KVCacheError(
                f"this pool holds [*, {self.k.shape[1]}, *, {self.k.shape[3]}] {self.k.dtype} blocks; "
                f"got {tuple(like.shape)} {like.dtype}"
            )

    def allocate(self, after: int | None = None, run: int = 1) -> int:
        """A free block: ``after + 1`` where it is free (a table growing into the block after its last one), else
        the lowest free block that starts a free, ``run``-aligned run of ``run`` blocks (room for its table to grow
        the same way: tables that grow together, an engine step's decode rows, would otherwise interleave block by
        block, and attention reads adjacent blocks as one run), else the lowest free block. Which block a position
        gets moves no result."""
        if not self._free:
            raise KVCacheError(
                f"block pool exhausted: all {self.num_blocks} blocks of {self.block_size} positions "
                "are in use (raise num_blocks or release sequences)"
            )
        b = self._pick(after, run)
        if b == self._free[-1]:
            self._free.pop()
        else:
            self._free.remove(b)
        self.refs[b] = 1
        return b

    def _pick(self, after: int | None, run: int) -> int:
        refs, n = self.refs, self.num_blocks
        if after is not None and after + 1 < n and not refs[after + 1]:
            return after + 1
        if run > 1:  # the first candidates, lowest first while the stack is in order: a fragmented pool's search
            for b in islice(reversed(self._free), 256):  # would cost more than adjacency saves
                if b % run == 0 and b + run <= n and not any(refs[b + 1 : b + run]):
                    return b
        return self._free[-1]

    def incref(self, b: int) -> None:
        self.refs[b] += 1

    def decref(self, b: int) -> None:
        if self.refs[b] <= 0:
            raise KVCacheError(f"block {b} freed twice")
        self.refs[b] -= 1
        if self.refs[b] == 0:
            self._free.append(b)


class PagedKVCache:
    """One layer's cache over a ``BlockTable`` of ``pool``, the numbers in the pool's own (per-layer) storage.

    ``prefix``: a ``BlockPrefixCache`` on the same pool; new blocks then come from its ``allocate``, which evicts
    cache-only blocks when the pool is empty (and they count as available to the before-writing check)."""

    def __init__(self, pool: BlockPool, prefix: Any = None):
        self.pool = pool
        self.prefix = prefix
        self._table = BlockTable(pool, prefix)

    @classmethod
    def adopt(cls, pool: BlockPool, blocks: list[int], prefix: Any = None) -> "PagedKVCache":
        """A sequence whose first ``len(blocks)`` full blocks are ``blocks`` (e.g. ``BlockPrefixCache.lookup``'s):
        the caller's references on them become the sequence's; the next write starts a new block."""
        cache = cls(pool, prefix)
        cache._table = BlockTable(pool, prefix, blocks)
        return cache

    @property
    def table(self) -> list[int]:
        return self._table.blocks

    @property
    def offset(self) -> int:
        return self._table.length

    @property
    def released(self) -> bool:
        return self._table.released

    def _live(self) -> None:
        if self.released:
            raise KVCacheError("this paged cache was released; it cannot be used again")

    @property
    def key_values(self) -> tuple[Any, Any] | None:
        self._live()
        if not self.offset:
            return None
        p = self.pool
        n = len(self.table)
        k = p.k[index(p.k, self.table)]  # [n, H, bs, D]
        v = p.v[index(p.v, self.table)]
        H, D = k.shape[1], k.shape[3]
        k = k.transpose(1, 0, 2, 3).reshape(1, H, n * p.block_size, D)[:, :, : self.offset]
        v = v.transpose(1, 0, 2, 3).reshape(1, H, n * p.block_size, D)[:, :, : self.offset]
        return k, v

    def _copy(self, src: int, dst: int) -> None:
        self.pool.k[dst] = self.pool.k[src]
        self.pool.v[dst] = self.pool.v[src]

    def update_and_fetch(self, keys: Any, values: Any) -> tuple[Any, Any]:
        self._live()
        _check_pair(keys, values)
        if keys.shape[0] != 1:
            raise KVCacheError(f"a paged cache holds one sequence; got batch {keys.shape[0]}")
        p, bs = self.pool, self.pool.block_size
        p.storage_for(keys)
        S = keys.shape[2]
        self._table.reserve(S, self._copy)
        pos = 0
        while pos < S:
            at = self.offset + pos
            row, blk = at % bs, self.table[at // bs]
            n = min(bs - row, S - pos)
            p.k[blk, :, row : row + n] = keys[0, :, pos : pos + n]
            p.v[blk, :, row : row + n] = values[0, :, pos : pos + n]
            pos += n
        self._table.advance(S)
        kv = self.key_values
        assert kv is not None
        return kv

    def trim(self, n: int) -> int:
        self._live()
        if type(n) is not int or n < 0 or n > self.offset:
            raise KVCacheError(f"cannot trim {n!r} positions from a cache holding {self.offset}")
        return self._table.trim(n)

    def fork(self) -> "PagedKVCache":
        self._live()
        child = PagedKVCache(self.pool, self.prefix)
        child._table = self._table.fork()
        return child

    def release(self) -> None:
        """Return this sequence's blocks to the pool; exactly once."""
        self._live()
        self._table.release()

    def materialize(self) -> tuple[Any, Any] | None:
        kv = self.key_values
        if kv is not None:
            evaluate(*kv)
        return kv

    def __repr__(self) -> str:
        return f"PagedKVCache(offset={self.offset}, blocks={self.table})"
