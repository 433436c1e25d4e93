"""BlockPrefixCache: full prompt blocks found again by chained hash + token check, shared by reference, evicted LRU."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fs_kvcache import BlockPool, BlockPrefixCache, DenseKVCache, KVCacheError, PagedKVCache

H, D, BS = 2, 3, 4


def kv_for(tokens):
    """K/V that depend on the token and its position, so a wrong block shows up in the values."""
    t = np.asarray(tokens, np.float32)
    k = (t + 0.001 * np.arange(len(t)))[None, None, :, None] * np.ones((1, H, 1, D), np.float32)
    return k, -k


def run(pool, cache, prompt):
    """One request: reuse the cached prefix, prefill the rest, publish, return (sequence, reused tokens)."""
    seq = PagedKVCache.adopt(pool, cache.lookup(prompt))
    reused = seq.offset
    if reused < len(prompt):
        seq.update_and_fetch(*(a[:, :, reused:] for a in kv_for(prompt)))
    cache.publish(prompt, seq.table)
    return seq, reused


def test_a_shared_prefix_is_reused_by_reference_and_gives_the_cold_values():
    pool = BlockPool(num_blocks=16, block_size=BS)
    cache = BlockPrefixCache(pool, "model-a")
    system = list(range(100, 110))  # 10 tokens: 2 full blocks + 2
    a, reused_a = run(pool, cache, [*system, 1, 2, 3])
    b, reused_b = run(pool, cache, [*system, 7, 8, 9, 9, 9])
    assert (reused_a, reused_b) == (0, 8)  # the partial third block is never shared
    assert b.table[:2] == a.table[:2] and pool.refs[a.table[0]] == 3  # a, b and the cache
    cold = DenseKVCache()
    cold.update_and_fetch(*kv_for([*system, 7, 8, 9, 9, 9]))
    np.testing.assert_array_equal(b.key_values[0], cold.key_values[0])
    np.testing.assert_array_equal(b.key_values[1], cold.key_values[1])
    a.release()
    b.release()
    assert pool.free_blocks + cache.cached_blocks == pool.num_blocks  # nothing leaked: the rest is cache-only


def test_keys_chain_the_whole_prefix_and_the_identity():
    pool = BlockPool(num_blocks=8, block_size=BS)
    one, other = BlockPrefixCache(pool, "model-a"), BlockPrefixCache(pool, "model-b")
    assert one.keys([1, 2, 3, 4, 5, 6, 7, 8])[1] != one.keys([0, 2, 3, 4, 5, 6, 7, 8])[1]  # block 1 sees block 0
    assert one.keys([1, 2, 3, 4]) != other.keys([1, 2, 3, 4])
    assert one.keys([1, 2, 3]) == []  # no full block


def test_a_hash_hit_is_checked_token_for_token():
    pool = BlockPool(num_blocks=8, block_size=BS)
    cache = BlockPrefixCache(pool, "m")
    seq, _ = run(pool, cache, [1, 2, 3, 4, 5])
    key = cache.keys([1, 2, 3, 4])[0]
    block, _ = cache._entries[key]
    cache._entries[key] = (block, (9, 9, 9, 9))  # as if another prefix collided on this key
    assert cache.lookup([1, 2, 3, 4, 5]) == []
    seq.release()


def test_eviction_takes_the_least_recently_used_cache_only_block_and_never_a_live_one():
    pool = BlockPool(num_blocks=4, block_size=BS)
    cache = BlockPrefixCache(pool, "m")
    blocks = {}
    for t in (1, 2, 3):
        seq, _ = run(pool, cache, [t] * BS)
        blocks[t] = seq.table[0]
        seq.release()
    assert cache.cached_blocks == 3
    for b in cache.lookup([1] * BS):  # touch 1: now 2 is the least recently used
        pool.decref(b)
    assert cache.evict(1) == 1 and cache.lookup([2] * BS) == [] and cache.entries == 2
    live = PagedKVCache.adopt(pool, cache.lookup([3] * BS))  # a live sequence holds 3's block
    while pool.free_blocks:
        pool.allocate()
    assert cache.allocate() == blocks[1]  # the pool is empty: 1, the only cache-only block, is given up
    assert live.table == [blocks[3]] and cache.lookup([1] * BS) == []
    with pytest.raises(KVCacheError, match="exhausted"):
        cache.allocate()  # the one cached block left is live


def test_publish_refuses_a_table_too_short_for_the_tokens():
    pool = BlockPool(num_blocks=4, block_size=BS)
    with pytest.raises(KVCacheError, match="fill 2 blocks"):
        BlockPrefixCache(pool, "m").publish(list(range(8)), [0])
    with pytest.raises(KVCacheError, match="not a live block"):
        PagedKVCache.adopt(pool, [3])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=14), min_size=1, max_size=12), st.data())
def test_random_requests_reuse_what_they_share_and_leak_nothing(prompts, data):
    """Prompts over a tiny alphabet share prefixes often; every request's K/V equals its cold computation, the
    reused count is exactly the cached full blocks of its longest published prefix, and after all releases every
    block is free or cache-only."""
    pool = BlockPool(num_blocks=64, block_size=BS)
    cache = BlockPrefixCache(pool, "m")
    published: list[list[int]] = []
    live = []
    for prompt in prompts:
        best = max((_shared_blocks(prompt, p) for p in published), default=0)
        seq, reused = run(pool, cache, prompt)
        assert reused == best * BS
        cold = DenseKVCache()
        cold.update_and_fetch(*kv_for(prompt))
        np.testing.assert_array_equal(seq.key_values[0], cold.key_values[0])
        published.append(prompt)
        live.append(seq)
        if data.draw(st.booleans()):
            live.pop(data.draw(st.integers(0, len(live) - 1))).release()
    for seq in live:
        seq.release()
    assert pool.free_blocks + cache.cached_blocks == pool.num_blocks
    cache.clear()
    assert pool.free_blocks == pool.num_blocks


def _shared_blocks(a, b):
    n = 0
    while (n + 1) * BS <= min(len(a), len(b)) and a[n * BS : (n + 1) * BS] == b[n * BS : (n + 1) * BS]:
        n += 1
    return n


def test_a_sequence_on_a_full_pool_takes_cache_only_blocks_and_refuses_past_them():
    pool = BlockPool(num_blocks=3, block_size=BS)
    cache = BlockPrefixCache(pool, "m")
    for t in (1, 2):
        seq, _ = run(pool, cache, [t] * BS)
        seq.release()
    grow = PagedKVCache(pool, prefix=cache)
    grow.update_and_fetch(*kv_for(range(3 * BS)))  # 1 free block + the 2 cache-only ones, evicted oldest first
    assert sorted(grow.table) == [0, 1, 2] and cache.entries == 0
    with pytest.raises(KVCacheError, match="1 more blocks needed, 0 free or evictable"):
        grow.update_and_fetch(*kv_for([5]))
    assert grow.offset == 3 * BS  # refused before writing anything


@settings(max_examples=50, deadline=None)
@given(tokens=st.lists(st.integers(0, 3), max_size=60), cuts=st.lists(st.integers(0, 60), max_size=4))
def test_extended_keys_equal_keys_computed_at_once(tokens, cuts):
    """A sequence growing block by block keeps its keys (the engine does); they must be the keys of the whole."""
    cache = BlockPrefixCache(BlockPool(num_blocks=4, block_size=BS), "model")
    keys: list[bytes] = []
    for n in [*sorted(cuts), len(tokens)]:
        cache.extend_keys(keys, tokens[: min(n, len(tokens))])
    assert keys == cache.keys(tokens)
