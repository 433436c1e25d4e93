import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fs_kvcache import BlockPool, DenseKVCache, KVCacheError, PagedKVCache

H, D = 2, 3


def kv(vals):
    k = np.asarray(vals, np.float32)[None, None, :, None] * np.ones((1, H, 1, D), np.float32)
    return k, -k


def test_paged_equals_dense_and_uses_the_block_table():
    pool = BlockPool(num_blocks=8, block_size=4)
    p, d = PagedKVCache(pool), DenseKVCache()
    for chunk in ([0, 1, 2], [3, 4, 5, 6, 7, 8], [9]):
        pk, pv = p.update_and_fetch(*kv(chunk))
        dk, dv = d.update_and_fetch(*kv(chunk))
        np.testing.assert_array_equal(pk, dk)
        np.testing.assert_array_equal(pv, dv)
    assert p.offset == 10 and len(p.table) == 3 and pool.free_blocks == 5


def test_fork_shares_blocks_and_copies_a_partial_block_on_write():
    pool = BlockPool(num_blocks=6, block_size=4)
    a = PagedKVCache(pool)
    a.update_and_fetch(*kv(range(6)))  # blocks: full [0..3], partial [4, 5]
    b = a.fork()
    assert b.table == a.table and pool.free_blocks == 4
    b.update_and_fetch(*kv([100]))
    assert b.table[0] == a.table[0] and b.table[1] != a.table[1]  # full block shared, partial one copied
    a.update_and_fetch(*kv([200]))
    assert a.key_values[0][0, 0, :, 0].tolist() == [0, 1, 2, 3, 4, 5, 200]
    assert b.key_values[0][0, 0, :, 0].tolist() == [0, 1, 2, 3, 4, 5, 100]
    a.release()
    b.release()
    assert pool.free_blocks == 6


def test_budget_release_and_misuse():
    pool = BlockPool(num_blocks=2, block_size=2)
    c = PagedKVCache(pool)
    c.update_and_fetch(*kv([1, 2, 3, 4]))
    with pytest.raises(KVCacheError, match="block pool exhausted: 1 more blocks needed, 0 free or evictable of 2"):
        c.update_and_fetch(*kv([5]))
    c.release()
    with pytest.raises(KVCacheError, match="released"):
        c.update_and_fetch(*kv([1]))
    with pytest.raises(KVCacheError, match="released"):
        c.release()
    d = PagedKVCache(pool)
    with pytest.raises(KVCacheError, match="one sequence"):
        d.update_and_fetch(np.zeros((2, H, 1, D), np.float32), np.zeros((2, H, 1, D), np.float32))
    d.update_and_fetch(*kv([1]))
    with pytest.raises(KVCacheError, match="this pool holds"):
        PagedKVCache(pool).update_and_fetch(np.zeros((1, 5, 1, D), np.float32), np.zeros((1, 5, 1, D), np.float32))
    with pytest.raises(KVCacheError, match="cannot trim 2"):
        d.trim(2)


def test_tables_growing_together_keep_their_blocks_side_by_side():
    """Two sequences decoding together ask for a block in turn. Without a run they interleave (0, 2, 4 / 1, 3, 5: every
    block its own tile for attention); with one (the engine's: its attention tile) each grows into the block after
    its last, and a fresh table starts where ``run`` blocks are free. A pool too fragmented for that still gives a
    block: the lowest free one."""
    from fs_kvcache import BlockTable

    def grow(run, steps):
        pool = BlockPool(num_blocks=16, block_size=2)
        tables = [BlockTable(pool, run=run) for _ in range(2)]
        for _ in range(steps):
            for t in tables:
                t.reserve(2, copy=None)
                t.advance(2)
        return pool, [t.blocks for t in tables]

    assert grow(1, 3)[1] == [[0, 2, 4], [1, 3, 5]]
    pool, blocks = grow(4, 5)
    assert blocks == [[0, 1, 2, 3, 8], [4, 5, 6, 7, 12]]  # a run each; the fifth block starts a fresh run of 4
    frag = BlockPool(num_blocks=4, block_size=2)
    held = [frag.allocate() for _ in range(4)]
    for b in (held[3], held[1]):  # free blocks 3 and 1: no two free side by side
        frag.decref(b)
    assert frag.allocate(after=None, run=4) == 1 and frag.allocate(after=0, run=4) == 3
    with pytest.raises(KVCacheError, match="run must be a positive int"):
        BlockTable(pool, run=0)


class PagedMachine(RuleBasedStateMachine):
    """Random fork / append / trim / release on paged handles: each live handle shows its own history, and when
    every handle is released the pool's free count is back where it started (no leak, no double free)."""

    @initialize()
    def start(self):
        self.pool = BlockPool(num_blocks=64, block_size=4)
        self.handles = [PagedKVCache(self.pool)]
        self.models = [[]]
        self.counter = 0

    def _pick(self, i):
        live = [j for j, h in enumerate(self.handles) if not h.released]
        return live[i % len(live)] if live else None

    @rule(i=st.integers(0, 99), n=st.integers(1, 9))
    def append(self, i, n):
        j = self._pick(i)
        if j is None or len(self.models[j]) + n > 40:
            return
        vals = list(range(self.counter, self.counter + n))
        self.counter += n
        try:
            self.handles[j].update_and_fetch(*kv(vals))
        except KVCacheError:
            assert self.handles[j].offset == len(self.models[j])  # refused before touching anything
            return
        self.models[j] += vals

    @precondition(lambda self: len(self.handles) < 10)
    @rule(i=st.integers(0, 99))
    def fork(self, i):
        j = self._pick(i)
        if j is not None:
            self.handles.append(self.handles[j].fork())
            self.models.append(list(self.models[j]))

    @rule(i=st.integers(0, 99), n=st.integers(0, 12))
    def trim(self, i, n):
        j = self._pick(i)
        if j is not None:
            n = min(n, self.handles[j].offset)
            self.handles[j].trim(n)
            self.models[j] = self.models[j][: len(self.models[j]) - n]

    @rule(i=st.integers(0, 99))
    def release(self, i):
        j = self._pick(i)
        if j is not None:
            self.handles[j].release()

    @invariant()
    def histories(self):
        for h, m in zip(self.handles, self.models, strict=True):
            if h.released:
                continue
            assert h.offset == len(m)
            if m:
                assert h.key_values[0][0, 1, :, 2].tolist() == m

    @invariant()
    def refcounts_match_tables(self):
        counts = [0] * self.pool.num_blocks
        for h in self.handles:
            for b in h.table:
                counts[b] += 1
        assert counts == self.pool.refs
        assert self.pool.free_blocks == counts.count(0)

    def teardown(self):
        for h in self.handles:
            if not h.released:
                h.release()
        assert self.pool.free_blocks == self.pool.num_blocks


PagedMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
TestPagedMachine = PagedMachine.TestCase


def test_prefault_maps_the_blocks_handed_out_first_and_refuses_a_pool_in_use():
    """A server maps its pool's first blocks before it says ready (fs_generate.warm_up); those are the blocks the
    pool hands out first, and since prefaulting writes zeros it must never touch a pool holding K/V."""
    from fs_kvcache import KVStore

    pool = BlockPool(8, 4)
    store = KVStore(pool, layers=2, kv_heads=2, head_dim=3, dtype=np.float32)
    store.prefault(3)
    assert [pool.allocate() for _ in range(3)] == [0, 1, 2]  # the prefaulted ones
    with pytest.raises(KVCacheError, match="no block in use"):
        store.prefault(3)


def _mapping_of(address):
    """The /proc/self/smaps fields of the mapping holding ``address``."""
    import re

    fields, inside = {}, False
    with open("/proc/self/smaps") as f:
        for line in f:
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
            if m:
                if inside:
                    break
                inside = int(m.group(1), 16) <= address < int(m.group(2), 16)
            elif inside and ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
    return fields


def test_a_pool_is_mapped_in_small_pages():
    """The engine's pool declines huge pages (kv_store's docstring: scattered first writes into 2 MiB pages stalled
    in the kernel's compaction, 3.7 s of a 21 s engine run). numpy's own zeros ask for huge pages, so a pool made
    with np.zeros fails this; the stored numbers and zeros on first read are what any array gives."""
    import sys

    from fs_kvcache import KVStore

    if not sys.platform.startswith("linux"):
        pytest.skip("huge pages are declined where the OS lets a mapping say so: Linux (elsewhere np.zeros)")
    with open("/proc/self/smaps") as f:
        if "THPeligible" not in f.read():
            pytest.skip("this kernel's /proc/self/smaps does not say whether a mapping may take huge pages")
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read()
    except OSError:
        thp = "[never]"
    if "[never]" in thp:
        pytest.skip(f"transparent huge pages are off on this host ({thp.strip()}): no mapping may take them")
    store = KVStore(BlockPool(4096, 16), layers=1, kv_heads=8, head_dim=128, dtype=np.uint16)  # 16 MiB a side
    k = store.k[0]
    assert k.shape == (8, 4096 * 16, 128) and not k.any()
    store.write(0, np.array([5, 40_000]), np.full((8, 2, 128), 7, np.uint16), np.ones((8, 2, 128), np.uint16))
    assert (k[:, [5, 40_000]] == 7).all() and int(k.sum()) == 7 * 8 * 2 * 128
    middle = k.nbytes // 2  # (numpy advises only the 2 MiB-aligned inside of its block: its first page is apart)
    assert _mapping_of(k.ctypes.data + middle)["THPeligible"] == "0"
    numpy_zeros = np.zeros(k.shape, k.dtype)  # kept alive while its mapping is read
    assert _mapping_of(numpy_zeros.ctypes.data + middle)["THPeligible"] == "1"  # what the pool declines
