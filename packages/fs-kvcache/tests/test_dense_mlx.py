import numpy as np
import pytest

from fs_kvcache import DenseKVCache

pytestmark = pytest.mark.parity


def test_mlx_arrays_fork_and_grow_without_touching_the_prefix(reference):
    mx = reference("mlx.core")
    parent = DenseKVCache()
    k = mx.arange(6, dtype=mx.float32).reshape(1, 1, 6, 1) * mx.ones((1, 2, 1, 4))
    prefix = parent.update_and_fetch(k, -k)
    before = np.array(prefix[0])
    child = parent.fork()
    assert child.key_values[0] is prefix[0]
    one = mx.full((1, 2, 1, 4), 100.0)
    a = child.update_and_fetch(one, -one)
    b = parent.update_and_fetch(one * 2, -one * 2)
    parent.materialize()
    np.testing.assert_array_equal(np.array(prefix[0]), before)
    assert np.array(a[0])[0, 0, :, 0].tolist() == [0, 1, 2, 3, 4, 5, 100]
    assert np.array(b[0])[0, 0, :, 0].tolist() == [0, 1, 2, 3, 4, 5, 200]
    child.trim(2)
    c = child.update_and_fetch(one * 3, -one * 3)
    assert np.array(c[0])[0, 0, :, 0].tolist() == [0, 1, 2, 3, 4, 300]
    assert np.array(a[0])[0, 0, :, 0].tolist() == [0, 1, 2, 3, 4, 5, 100]
