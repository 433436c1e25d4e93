import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fs_kvcache import DenseKVCache, KVCacheError

B, H, D = 1, 2, 4


def kv(start: int, n: int, b: int = B) -> tuple[np.ndarray, np.ndarray]:
    """Values that encode their own position, so any misplaced write shows."""
    k = np.arange(start, start + n, dtype=np.float32)[None, None, :, None] * np.ones((b, H, 1, D), np.float32)
    return k, -k


def test_update_returns_new_objects_with_the_whole_history():
    c = DenseKVCache()
    assert c.key_values is None and c.offset == 0
    k1, _ = c.update_and_fetch(*kv(0, 3))
    k2, v2 = c.update_and_fetch(*kv(3, 1))
    assert k2 is not k1 and c.offset == 4 and k2.shape == (B, H, 4, D)
    np.testing.assert_array_equal(k2[0, 0, :, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(v2, -k2)
    np.testing.assert_array_equal(k1[0, 0, :, 0], [0, 1, 2])  # the caller's earlier arrays are untouched
    assert c.key_values[0] is k2


def test_growth_is_amortised():
    c = DenseKVCache()
    buffers = set()
    for i in range(3000):
        c.update_and_fetch(*kv(i, 1))
        buffers.add(id(c._buf[0]))
    assert len(buffers) <= 5  # 256 -> 512 -> 1024 -> 2048 -> 4096: doubling, not one copy per token
    np.testing.assert_array_equal(c.key_values[0][0, 1, :, 2], np.arange(3000))


def test_fork_shares_the_prefix_and_never_changes_it():
    parent = DenseKVCache()
    prefix = parent.update_and_fetch(*kv(0, 5))
    snapshot = prefix[0].copy()
    child = parent.fork()
    assert child.key_values[0] is prefix[0] and child.offset == 5  # by reference, no copy
    a = child.update_and_fetch(*kv(100, 2))
    b = parent.update_and_fetch(*kv(200, 3))
    np.testing.assert_array_equal(prefix[0], snapshot)
    np.testing.assert_array_equal(a[0][0, 0, :, 0], [0, 1, 2, 3, 4, 100, 101])
    np.testing.assert_array_equal(b[0][0, 0, :, 0], [0, 1, 2, 3, 4, 200, 201, 202])
    sibling = parent.fork()
    sibling.trim(4)
    sibling.update_and_fetch(*kv(300, 1))
    np.testing.assert_array_equal(parent.key_values[0][0, 0, :, 0], [0, 1, 2, 3, 4, 200, 201, 202])


def test_cache_from_existing_arrays_and_trim():
    k, v = kv(0, 4)
    c = DenseKVCache(key_values=(k, v))
    assert c.offset == 4 and c.key_values[0] is k
    c.update_and_fetch(*kv(4, 1))
    np.testing.assert_array_equal(k[0, 0, :, 0], [0, 1, 2, 3])
    held = c.key_values[0]
    assert c.trim(3) == 3 and c.offset == 2
    c.update_and_fetch(*kv(50, 1))
    np.testing.assert_array_equal(held[0, 0, :, 0], [0, 1, 2, 3, 4])  # trimmed-away values seen by holders survive
    np.testing.assert_array_equal(c.key_values[0][0, 0, :, 0], [0, 1, 50])


def test_bad_use():
    c = DenseKVCache()
    c.update_and_fetch(*kv(0, 2))
    with pytest.raises(KVCacheError, match="cannot trim 3"):
        c.trim(3)
    with pytest.raises(KVCacheError, match="batch, kv_heads, head_dim and dtype must match"):
        c.update_and_fetch(np.zeros((1, 3, 1, D), np.float32), np.zeros((1, 3, 1, D), np.float32))
    with pytest.raises(KVCacheError, match="must match"):
        c.update_and_fetch(np.zeros((1, H, 1, D), np.float16), np.zeros((1, H, 1, D), np.float16))
    with pytest.raises(KVCacheError, match="must both be"):
        c.update_and_fetch(np.zeros((1, H, 1, D), np.float32), np.zeros((1, H, 2, D), np.float32))
    with pytest.raises(KVCacheError, match="keys are float32 but values are float16"):
        c.update_and_fetch(np.zeros((1, H, 1, D), np.float32), np.zeros((1, H, 1, D), np.float16))


class ForkMachine(RuleBasedStateMachine):
    """Random fork / append / trim sequences: every handle always shows exactly its own history, and no array
    ever handed out changes afterwards."""

    @initialize()
    def start(self):
        self.caches = [DenseKVCache()]
        self.models = [[]]  # the positions' values each handle should show
        self.handed = []  # (array, expected values) for every array ever returned
        self.counter = 0

    @rule(i=st.integers(0, 50), n=st.integers(1, 300))
    def append(self, i, n):
        i %= len(self.caches)
        vals = list(range(self.counter, self.counter + n))
        self.counter += n
        k, _ = self.caches[i].update_and_fetch(*_vals(vals))
        self.models[i] = self.models[i] + vals
        self.handed.append((k, list(self.models[i])))

    @precondition(lambda self: len(self.caches) < 8)
    @rule(i=st.integers(0, 50))
    def fork(self, i):
        i %= len(self.caches)
        self.caches.append(self.caches[i].fork())
        self.models.append(list(self.models[i]))

    @rule(i=st.integers(0, 50), n=st.integers(0, 400))
    def trim(self, i, n):
        i %= len(self.caches)
        n = min(n, self.caches[i].offset)
        self.caches[i].trim(n)
        self.models[i] = self.models[i][: len(self.models[i]) - n]

    @invariant()
    def handles_show_their_history(self):
        for c, m in zip(self.caches, self.models, strict=True):
            assert c.offset == len(m)
            if m:
                np.testing.assert_array_equal(c.key_values[0][0, 0, :, 0], m)
                np.testing.assert_array_equal(c.key_values[1][0, 0, :, 0], [-x for x in m])

    @invariant()
    def handed_out_arrays_never_change(self):
        for arr, m in self.handed:
            np.testing.assert_array_equal(arr[0, 0, :, 0], m)


def _vals(vals):
    k = np.asarray(vals, np.float32)[None, None, :, None] * np.ones((B, H, 1, D), np.float32)
    return k, -k


ForkMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestForkMachine = ForkMachine.TestCase


def test_speculative_rollback_in_place_keeps_the_buffer_and_its_capacity():
    """Feed 4, trim 3, again and again (drafts verified and rejected): the fused kernels' buffers are read during
    the call only, so no trim freezes anything - the same buffer, the same capacity, no copy of the history."""
    c = DenseKVCache()
    c.update_and_fetch_buffers(*kv(0, 10))
    first = c.update_and_fetch_buffers(*kv(10, 1))[0]
    for i in range(200):
        K, _, length = c.update_and_fetch_buffers(*kv(1000 + i, 4))
        assert K is first and length == i + 15
        c.trim(3)
    assert c.offset == 211 and c.key_values[0].shape[2] == 211 and first.shape[2] <= 512
    held = c.key_values[0]  # shown now: a trim below it must move the next write to a fresh buffer
    c.trim(5)
    c.update_and_fetch(*kv(7, 1))
    assert held[0, 0, 206, 0] == 1000 + 195 and c.key_values[0][0, 0, 206, 0] == 7
    assert c.update_and_fetch_buffers(*kv(8, 1))[0].shape[2] == first.shape[2]  # moved, not doubled
