"""``RadixPrefixCache``: reuse the KV state of the longest cached prefix of a new prompt.

A tree over token IDs in blocks of ``block_size`` (matches are block-aligned, as a paged cache would share them).
Each inserted sequence is an *entry* holding its per-layer (K, V); the state of any prefix of an entry is a slice
of the entry's arrays, so one entry serves every prefix of itself. Entries are evicted least-recently-used first
when their bytes exceed ``max_bytes`` - never while pinned. The cache is tied to an identity (model, tokenizer,
dtype): asking it with another identity is an error, so it never serves a different model.
"""

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from .errors import KVCacheError

State = list[tuple[Any, Any]]  # per layer (K, V), [B, H, S, D]


@dataclass
class _Node:
    children: dict[tuple[int, ...], "_Node"] = field(default_factory=dict)
    entries: set[int] = field(default_factory=set)  # entries whose tokens pass through this node


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    state: State
    nbytes: int
    used: int
    pins: int = 0


class RadixPrefixCache:
    def __init__(self, identity: Hashable, *, max_bytes: int = 1 << 30, block_size: int = 16):
        if block_size < 1 or max_bytes < 0:
            raise KVCacheError("block_size must be >= 1 and max_bytes >= 0")
        self.identity, self.max_bytes, self.block_size = identity, max_bytes, block_size
        self.root = _Node()
        self.entries: dict[int, _Entry] = {}
        self.nbytes = 0
        self._ids = count()
        self._clock = count()

    def _check(self, identity: Hashable | None) -> None:
        if identity is not None and identity != self.identity:
            raise KVCacheError(f"this prefix cache belongs to {self.identity!r}, not {identity!r}")

    def _blocks(self, tokens: Sequence[int]) -> list[tuple[int, ...]]:
        bs = self.block_size
        return [tuple(tokens[i : i + bs]) for i in range(0, len(tokens) // bs * bs, bs)]

    def _walk(self, tokens: Sequence[int]) -> tuple[int, _Node]:
        """(aligned length matched, deepest node reached)."""
        node, n = self.root, 0
        for blk in self._blocks(tokens):
            child = node.children.get(blk)
            if child is None or not child.entries:
                break
            node, n = child, n + len(blk)
        return n, node

    def match(self, tokens: Sequence[int], identity: Hashable | None = None) -> tuple[int, State | None]:
        """(length, state): the longest block-aligned cached prefix of ``tokens`` and its per-layer K/V sliced to
        that length, or (0, None)."""
        self._check(identity)
        n, node = self._walk(tokens)
        if n == 0:
            return 0, None
        e = self.entries[max(node.entries, key=lambda i: self.entries[i].used)]
        e.used = next(self._clock)
        return n, [(k[:, :, :n], v[:, :, :n]) for k, v in e.state]

    def insert(self, tokens: Sequence[int], state: State, identity: Hashable | None = None) -> int:
        """Cache ``state`` (per-layer K/V covering at least the aligned part of ``tokens``); returns the aligned
        length stored (0 when shorter than one block)."""
        self._check(identity)
        blocks = self._blocks(tokens)
        n = len(blocks) * self.block_size
        if n == 0:
            return 0
        if any(k.shape[2] < n or v.shape[2] < n for k, v in state):
            raise KVCacheError(f"state covers fewer than the {n} positions being inserted")
        covered, node = self._walk(tokens)
        if covered == n:  # an existing entry already serves this prefix
            for i in node.entries:
                self.entries[i].used = next(self._clock)
            return n
        state = [(k[:, :, :n], v[:, :, :n]) for k, v in state]
        eid = next(self._ids)
        e = _Entry(tuple(tokens[:n]), state, sum(int(k.nbytes) + int(v.nbytes) for k, v in state), next(self._clock))
        node = self.root
        for blk in blocks:
            node = node.children.setdefault(blk, _Node())
            node.entries.add(eid)
        self.entries[eid] = e
        self.nbytes += e.nbytes
        for other in [i for i, o in self.entries.items() if i != eid and not o.pins and _is_prefix(o.tokens, e.tokens)]:
            self._remove(other)  # the new entry serves every prefix the shorter one did
        self._evict(keep=eid)
        return n

    def pin(self, tokens: Sequence[int]) -> int:
        """Pin the entry ``match(tokens)`` would use; returns a key for ``unpin``."""
        n, node = self._walk(tokens)
        if n == 0:
            raise KVCacheError("nothing cached for this prefix")
        eid = max(node.entries, key=lambda i: self.entries[i].used)
        self.entries[eid].pins += 1
        return eid

    def unpin(self, key: int) -> None:
        e = self.entries.get(key)
        if e is None or e.pins == 0:
            raise KVCacheError(f"entry {key} is not pinned")
        e.pins -= 1
        self._evict()

    def _evict(self, keep: int | None = None) -> None:
        while self.nbytes > self.max_bytes:
            victims = [i for i, e in self.entries.items() if e.pins == 0 and i != keep]
            if not victims:
                break  # everything left is pinned (or just inserted): over budget until unpinned
            self._remove(min(victims, key=lambda i: self.entries[i].used))
        if keep is not None and self.nbytes > self.max_bytes and self.entries[keep].pins == 0:
            self._remove(keep)

    def _remove(self, eid: int) -> None:
        e = self.entries.pop(eid)
        self.nbytes -= e.nbytes
        node = self.root
        for blk in self._blocks(e.tokens):
            child = node.children[blk]
            child.entries.discard(eid)
            if not child.entries:
                del node.children[blk]
                break
            node = child

    def __len__(self) -> int:
        return len(self.entries)


def _is_prefix(short: tuple[int, ...], long: tuple[int, ...]) -> bool:
    return len(short) <= len(long) and long[: len(short)] == short
