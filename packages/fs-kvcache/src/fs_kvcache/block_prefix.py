"""``BlockPrefixCache``: full blocks of prompt K/V kept in a ``BlockPool`` and found again by their content.

Why blocks: two requests that share a system prompt share its K/V blocks by reference count instead of each holding
a copy (the radix cache's per-entry copies), and a finished request's full blocks stay reusable until the pool needs
the room.

Contract (nano-vllm's scheme). A full block of ``block_size`` tokens at position ``i`` of a prompt is keyed by

    key_i = sha256(key_{i-1} ‖ token ids of block i as int64),   key_{-1} = sha256(identity)

so a key names the whole prefix up to the end of its block, and ``identity`` (weights digest, dtypes, block size:
``identity_string(...)``) keeps two models' blocks apart. A hit is also checked token for token, so a hash
collision cannot hand back another prefix's K/V. The partly filled last block is never cached.

    cache = BlockPrefixCache(pool, identity)
    blocks = cache.lookup(prompt)          # the longest cached run of full blocks; the caller now holds each
    ...                                    # prefill the rest, decode; allocate with cache.allocate()
    cache.publish(prompt, table)           # the sequence's full prompt blocks become findable (the cache holds one
                                           # reference of its own on each)
    # release the sequence's references as usual: blocks only the cache holds are "cached", evictable

When the pool is empty, ``allocate`` evicts the least recently used block that only the cache holds. A hit touches
a run's blocks from its end back to its start, so a prefix's first blocks are the last to go (evicting one makes
every later block of that prefix unreachable).
"""

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from .errors import KVCacheError
from .paged import BlockPool


class BlockPrefixCache:
    def __init__(self, pool: BlockPool, identity: str):
        self.pool = pool
        self.root = hashlib.sha256(identity.encode()).digest()
        self._entries: OrderedDict[bytes, tuple[int, tuple[int, ...]]] = OrderedDict()  # key -> (block, tokens)
        self._keyed: dict[int, bytes] = {}  # block -> its key
        self.hits = 0  # blocks handed out by lookup (for the engine's cached-token report)

    def keys(self, tokens: Sequence[int]) -> list[bytes]:
        """The chained key of every full block of ``tokens``."""
        return self.extend_keys([], tokens)

    def extend_keys(self, keys: list[bytes], tokens: Sequence[int]) -> list[bytes]:
        """``keys`` - the keys of ``tokens``' first ``len(keys)`` full blocks - extended in place to all of them: a
        growing sequence hashes each block once, not its whole prefix again at every new block."""
        bs = self.pool.block_size
        prev = keys[-1] if keys else self.root
        for a in range(len(keys) * bs, len(tokens) - bs + 1, bs):
            prev = hashlib.sha256(prev + np.asarray(tokens[a : a + bs], np.int64).tobytes()).digest()
            keys.append(prev)
        return keys

    def lookup(self, tokens: Sequence[int]) -> list[int]:
        """Blocks holding the K/V of the longest cached run of ``tokens``' full blocks, from the first; the caller
        holds one reference on each (release them with ``pool.decref`` or through its ``PagedKVCache``)."""
        bs, found = self.pool.block_size, []
        for i, key in enumerate(self.keys(tokens)):
            entry = self._entries.get(key)
            if entry is None or entry[1] != tuple(tokens[i * bs : (i + 1) * bs]):
                break
            found.append(entry[0])
        for key in reversed(self.keys(tokens)[: len(found)]):  # the run's start ends up most recent
            self._entries.move_to_end(key)
        for b in found:
            self.pool.incref(b)
        self.hits += len(found)
        return found

    def publish(self, tokens: Sequence[int], table: Sequence[int], keys: list[bytes] | None = None) -> int:
        """Make the full blocks of ``tokens`` (held in ``table``'s blocks, in order) findable; returns how many
        were new. A block already cached under its key stays; the cache takes one reference on each new one.
        ``keys``: the blocks' keys when the caller keeps them (``extend_keys``), else computed here."""
        bs, new = self.pool.block_size, 0
        keys = self.keys(tokens) if keys is None else keys[: len(tokens) // bs]
        if len(table) < len(keys):
            raise KVCacheError(f"{len(tokens)} tokens fill {len(keys)} blocks but the table has {len(table)}")
        for i in reversed(range(len(keys))):  # the prefix's start ends up most recent
            key, block = keys[i], table[i]
            if key in self._entries:
                self._entries.move_to_end(key)
                continue
            if block in self._keyed:  # a block holds one prefix's K/V; it cannot be two entries
                raise KVCacheError(f"block {block} is already cached under another prefix")
            self._entries[key] = (block, tuple(tokens[i * bs : (i + 1) * bs]))
            self._keyed[block] = key
            self.pool.incref(block)
            new += 1
        return new

    @property
    def cached_blocks(self) -> int:
        """Blocks held only by this cache (no live sequence uses them): what eviction may take."""
        return sum(1 for b, _ in self._entries.values() if self.pool.refs[b] == 1)

    @property
    def entries(self) -> int:
        return len(self._entries)

    def allocate(self, after: int | None = None, run: int = 1) -> int:
        """A free block from the pool (``BlockPool.allocate``'s choice), evicting the least recently used
        cache-only block when there is none."""
        if not self.pool.free_blocks and not self.evict(1):
            return self.pool.allocate()  # nothing evictable: the pool says it is exhausted
        return self.pool.allocate(after, run)

    def evict(self, n: int) -> int:
        """Free up to ``n`` cache-only blocks, least recently used first; returns how many were freed."""
        freed = 0
        for key in list(self._entries):
            if freed == n:
                break
            block, _ = self._entries[key]
            if self.pool.refs[block] == 1:
                del self._entries[key], self._keyed[block]
                self.pool.decref(block)
                freed += 1
        return freed

    def clear(self) -> None:
        """Drop every entry (the cache's references; blocks live sequences hold stay theirs)."""
        for block, _ in self._entries.values():
            self.pool.decref(block)
        self._entries.clear()
        self._keyed.clear()
