"""QuantizedKVCache: the dense cache's growth, trim and fork rules applied to the six arrays of an affine-coded
K/V (codes, scales, biases per side), and its shape checks."""

import numpy as np
import pytest

from fs_kvcache import DenseKVCache, KVCacheError, QuantizedKVCache

B, H, D, BITS, GS = 1, 2, 32, 4, 32


def triple(start: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parts that encode their own position (codes, scales and biases alike), so a misplaced write shows."""
    pos = np.arange(start, start + n)[None, None, :, None]
    codes = (pos * np.ones((B, H, 1, D * BITS // 32))).astype(np.uint32)
    scales = (pos * np.ones((B, H, 1, D // GS))).astype(np.float32)
    return codes, scales, -scales


def test_update_keeps_every_part_of_every_position_in_order():
    c = QuantizedKVCache(BITS, GS)
    c.update_and_fetch(triple(0, 3), triple(100, 3))
    (kc, ks, kb), (vc, vs, vb) = c.update_and_fetch(triple(3, 300), triple(103, 300))  # past the first buffer
    assert c.offset == 303 and kc.shape == (B, H, 303, D * BITS // 32) and ks.shape == (B, H, 303, 1)
    np.testing.assert_array_equal(kc[0, 1, :, 0], np.arange(303))
    np.testing.assert_array_equal(kb[0, 0, :, 0], -np.arange(303))
    np.testing.assert_array_equal(vs[0, 0, :, 0], np.arange(100, 403))
    np.testing.assert_array_equal(vc[0, 0, :, 0], np.arange(100, 403))
    np.testing.assert_array_equal(vb[0, 1, :, 0], -np.arange(100, 403))


def test_fork_and_trim_never_change_what_was_handed_out():
    c = QuantizedKVCache(BITS, GS)
    c.update_and_fetch(triple(0, 4), triple(0, 4))
    child = c.fork()
    child.update_and_fetch(triple(50, 1), triple(50, 1))
    (kc, _, _), _ = c.update_and_fetch(triple(4, 1), triple(4, 1))
    np.testing.assert_array_equal(kc[0, 0, :, 0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(child.key_values[0][0][0, 0, :, 0], [0, 1, 2, 3, 50])
    assert isinstance(child, QuantizedKVCache) and (child.bits, child.group_size) == (BITS, GS)
    before = c.key_values
    c.trim(2)
    c.update_and_fetch(triple(9, 1), triple(9, 1))
    np.testing.assert_array_equal(before[0][0][0, 0, :, 0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(c.key_values[0][0][0, 0, :, 0], [0, 1, 2, 9])


def test_it_holds_a_fraction_of_a_dense_caches_bytes():
    q, d = QuantizedKVCache(BITS, GS), DenseKVCache()
    q.update_and_fetch(triple(0, 100), triple(0, 100))
    d.update_and_fetch(np.zeros((B, H, 100, D), np.float32), np.zeros((B, H, 100, D), np.float32))
    assert q.nbytes * 4 < d.nbytes  # 4-bit codes + a scale and a bias per 32 dims vs float32


def test_bad_parts_are_refused_by_name():
    with pytest.raises(KVCacheError, match="kv bits must be one of"):
        QuantizedKVCache(3, GS)
    with pytest.raises(KVCacheError, match="multiple of 8"):
        QuantizedKVCache(4, 12)
    c = QuantizedKVCache(BITS, GS)
    k = triple(0, 2)
    with pytest.raises(KVCacheError, match=r"takes keys as \(codes, scales, biases\)"):
        c.update_and_fetch(np.zeros((B, H, 2, D), np.float32), k)
    with pytest.raises(KVCacheError, match="do not match at group size 32"):
        c.update_and_fetch((k[0], k[1][..., :0], k[2][..., :0]), k)
    with pytest.raises(KVCacheError, match="differ in B, heads or S"):
        c.update_and_fetch(k, triple(0, 3))
    c.update_and_fetch(k, k)
    with pytest.raises(KVCacheError, match="cannot append"):
        c.update_and_fetch(*(tuple(a.astype(np.float64) if a.dtype == np.float32 else a for a in k),) * 2)


def test_a_quantized_block_pool_keeps_each_slot_s_triple_and_copies_all_three_parts():
    """The engine's pool with ``bits``: codes, scales and biases per slot; write, gather and a copy-on-write copy
    move the three together (copying only the codes would give a forked block its parent's scales... or none)."""
    from fs_kvcache import BlockPool, KVStore

    pool = BlockPool(6, 4)
    store = KVStore(pool, layers=2, kv_heads=2, head_dim=8, dtype=np.float32, bits=4, group_size=4)
    assert [a.shape for a in store.k[0]] == [(2, 24, 1), (2, 24, 2), (2, 24, 2)]
    assert store.nbytes == 6 * KVStore.block_bytes(2, 2, 8, np.float32, 4, bits=4, group_size=4)
    assert KVStore.block_bytes(2, 2, 8, np.float32, 4, bits=4, group_size=4) == 2 * 2 * 2 * 4 * (4 + 16)
    rng = np.random.default_rng(0)

    def triple(n):
        return (rng.integers(0, 2**32, (2, n, 1), dtype=np.uint32), rng.random((2, n, 2), np.float32),
                rng.random((2, n, 2), np.float32))  # fmt: skip

    k, v = triple(3), triple(3)
    table = np.array([4, 1])  # positions 0-3 in block 4, 4-7 in block 1
    store.write(1, store.slots(table, 6)[3:], k, v)  # positions 3, 4, 5
    K, V = store.gather(1, table, 6)
    for got, want in ((K, k), (V, v)):
        for g, w in zip(got, want, strict=True):
            assert g.shape == (1, *w.shape[:1], 6, w.shape[2]) and (g[0, :, 3:] == w).all()
    store.copy(1, 0)
    K0, _ = store.gather(1, np.array([4, 0]), 6)
    assert all((a == b).all() for a, b in zip(K0, K, strict=True))
    with pytest.raises(KVCacheError, match="keeps 3 array"):
        store.write(0, store.slots(table, 1), k[0][:, :1], v[0][:, :1])
    with pytest.raises(KVCacheError, match="do not fit heads of 8 dims"):
        KVStore(pool, layers=1, kv_heads=2, head_dim=8, dtype=np.float32, bits=4, group_size=3)
