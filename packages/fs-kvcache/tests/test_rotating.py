"""RotatingKVCache sees exactly mlx-lm's window at every step: the first ``keep`` positions, then the most recent
ones - checked against a list of the positions that should be visible, whatever mix of chunks and single steps."""

import numpy as np
import pytest

from fs_kvcache import KVCacheError, RotatingKVCache


def tagged(start, n):
    """K/V [1, 1, n, 1] whose values are their positions, so the visible set can be read back."""
    x = np.arange(start, start + n, dtype=np.float32).reshape(1, 1, n, 1)
    return x, x.copy()


def expected(fed, S, max_size, keep):
    """The positions a step of S new tokens sees after ``fed`` earlier ones (mlx-lm's RotatingKVCache)."""
    old = list(range(fed))
    room = max_size - 1  # old positions any step keeps: one new token then makes max_size
    if len(old) > room:
        old = old[:keep] + old[len(old) - (room - keep) :]
    return old + list(range(fed, fed + S))


@pytest.mark.parametrize("steps", [[1] * 40, [7, 1, 1, 5, 1, 1, 1, 1, 1, 9, 1, 1, 1, 30, 1, 1], [25, 1, 1, 1], [3] * 9])
@pytest.mark.parametrize("max_size, keep", [(12, 4), (8, 0), (16, 1)])
def test_the_visible_positions_are_mlx_lms_window(steps, max_size, keep):
    c, fed = RotatingKVCache(max_size, keep), 0
    for S in steps:
        k, v = c.update_and_fetch(*tagged(fed, S))
        got = k[0, 0, :, 0].astype(int).tolist()
        if S > 1:  # a chunk's causal mask needs temporal order: its tokens last
            assert got == sorted(got)
        assert sorted(got) == expected(fed, S, max_size, keep), (fed, S)
        assert len(got) <= max_size or S > 1
        assert np.array_equal(k, v)
        fed += S
        assert c.offset == fed
    temporal = c.key_values[0][0, 0, :, 0].astype(int).tolist()
    assert temporal == sorted(temporal)  # key_values is in temporal order even while the ring is rotated


def test_a_decode_step_writes_in_place_once_full():
    c = RotatingKVCache(8, 2)
    for t in range(8):
        c.update_and_fetch(*tagged(t, 1))
    buf = c.update_and_fetch_buffers(*tagged(8, 1))[0]
    for t in range(9, 30):
        assert c.update_and_fetch_buffers(*tagged(t, 1))[0] is buf  # no copy of the window per token
    assert c.nbytes == 2 * buf.nbytes


def test_bad_sizes():
    with pytest.raises(KVCacheError, match="keep < max_size"):
        RotatingKVCache(4, 4)


def test_until_it_drops_a_position_it_is_a_dense_cache_that_trims():
    """Speculative decoding's rollback: a chunk the window holds whole needs no mask beyond causal, and trimming it
    leaves what the cache held before it; once a position is gone, a trim (which would need it back) is refused."""
    c = RotatingKVCache(12, 2)
    c.update_and_fetch(*tagged(0, 5))
    assert c.chunk_mask(7) is None and c.chunk_mask(8) is not None  # 5 + 7 fits in 12, 5 + 8 does not
    c.update_and_fetch(*tagged(5, 6))
    assert c.trim(4) == 4 and c.offset == c.n == 7
    k, _ = c.update_and_fetch(*tagged(7, 2))  # the trimmed positions are fed again
    assert k[0, 0, :, 0].astype(int).tolist() == list(range(9))
    for t in range(9, 14):  # full at 12, then the ring overwrites position 2
        c.update_and_fetch(*tagged(t, 1))
    with pytest.raises(KVCacheError, match="has dropped positions"):
        c.trim(1)
    assert c.trim(0) == 0
