"""The BPE merge loop over one pre-token, with a cache so repeated words cost one dict lookup."""

import heapq

from .errors import TokenizerError

CACHE_LIMIT = 200_000


class BPE:
    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]], *, ignore_merges: bool = False):
        self.vocab = vocab
        self.ranks: dict[tuple[str, str], int] = {}
        for rank, (a, b) in enumerate(merges):
            if a not in vocab or b not in vocab or a + b not in vocab:
                missing = next(t for t in (a, b, a + b) if t not in vocab)
                raise TokenizerError(f"merge #{rank} {a!r} + {b!r} names {missing!r}, which is not in the vocab")
            self.ranks.setdefault((a, b), rank)
        self.ignore_merges = ignore_merges
        self.cache: dict[str, tuple[int, ...]] = {}

    def encode(self, word: str) -> tuple[int, ...]:
        """``word`` is one pre-token already mapped to byte-level characters."""
        ids = self.cache.get(word)
        if ids is not None:
            return ids
        if self.ignore_merges and word in self.vocab:
            parts = [word]
        else:
            parts = self._merge(word) if len(word) < 48 else self._merge_heap(word)
        try:
            ids = tuple(self.vocab[p] for p in parts)
        except KeyError as e:
            raise TokenizerError(f"piece {e.args[0]!r} of {word!r} is not in the vocab") from None
        if len(self.cache) >= CACHE_LIMIT:
            self.cache.clear()
        self.cache[word] = ids
        return ids

    def _merge(self, word: str) -> list[str]:
        parts = list(word)
        ranks = self.ranks
        while len(parts) > 1:
            best, best_rank = -1, 1 << 62
            for i in range(len(parts) - 1):
                r = ranks.get((parts[i], parts[i + 1]))
                if r is not None and r < best_rank:
                    best, best_rank = i, r
            if best < 0:
                break
            parts[best : best + 2] = [parts[best] + parts[best + 1]]
        return parts

    def _merge_heap(self, word: str) -> list[str]:
        """Same result as ``_merge`` (lowest rank first, leftmost on ties) in O(n log n) for long pieces."""
        syms = list(word)
        n = len(syms)
        nxt = list(range(1, n + 1))
        prv = list(range(-1, n - 1))
        ranks = self.ranks
        heap = [(r, i) for i in range(n - 1) if (r := ranks.get((syms[i], syms[i + 1]))) is not None]
        heapq.heapify(heap)
        while heap:
            r, i = heapq.heappop(heap)
            j = nxt[i] if syms[i] else n
            if j >= n or not syms[i] or ranks.get((syms[i], syms[j])) != r:
                continue  # stale entry: one side was merged away since it was pushed
            syms[i] += syms[j]
            syms[j] = ""
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prv[nxt[j]] = i
            if prv[i] >= 0 and (rl := ranks.get((syms[prv[i]], syms[i]))) is not None:
                heapq.heappush(heap, (rl, prv[i]))
            if nxt[i] < n and (rr := ranks.get((syms[i], syms[nxt[i]]))) is not None:
                heapq.heappush(heap, (rr, i))
        return [s for s in syms if s]
