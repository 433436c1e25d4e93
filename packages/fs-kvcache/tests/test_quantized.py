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
