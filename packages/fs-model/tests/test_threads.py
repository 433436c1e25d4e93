"""How many threads a kernel call uses: chosen by timing the calls (cpu/threads.py), and invisible in the results."""

import time

import numpy as np
import pytest

from fs_model import cpu
from fs_model.cpu import threads
from fs_model.cpu.affine import AffineLinear, quantize_affine
from fs_model.cpu.bf16 import Bf16Linear
from fs_weights import f32_to_bf16


@pytest.fixture
def two_fake_threads(monkeypatch):
    """A pool of 2 whose thread count is only recorded, so a fake kernel can be slow on one side or the other."""
    now = {"n": None}
    monkeypatch.setattr(threads, "pool_size", lambda: 2)
    monkeypatch.setattr(threads, "_use", lambda n: now.__setitem__("n", n))
    threads.forget()
    yield now
    threads.forget()


def slow_on(side, now, ms=2.0):
    def kernel():
        if now["n"] == side:
            time.sleep(ms / 1e3)
        return now["n"]

    return kernel


@pytest.mark.parametrize("slow_side, winner", [(1, 2), (2, 1)])
def test_the_faster_thread_count_wins_the_contest(two_fake_threads, slow_side, winner):
    kernel = slow_on(slow_side, two_fake_threads)
    used = [threads.fan_out("k", kernel) for _ in range(1 + 2 * threads.PROBES)]
    assert used[0] == 2 and sorted(used[1:]) == [1] * threads.PROBES + [2] * threads.PROBES  # warm-up, then both
    assert threads.choices() == {("k", 2): winner}
    assert {threads.fan_out("k", kernel) for _ in range(50)} == {winner}


def test_a_change_of_load_is_noticed_at_the_next_contest(two_fake_threads, monkeypatch):
    monkeypatch.setattr(threads, "REPROBE", 20)
    side = {"slow": 1}
    now = two_fake_threads

    def kernel():
        if now["n"] == side["slow"]:
            time.sleep(0.002)
        return now["n"]

    for _ in range(1 + 2 * threads.PROBES):
        threads.fan_out("k", kernel)
    assert threads.choices() == {("k", 2): 2}
    side["slow"] = 2  # the other core got busy: two threads are now the slow side
    for _ in range(threads.REPROBE + 2 * threads.PROBES + 1):
        threads.fan_out("k", kernel)
    assert threads.choices() == {("k", 2): 1}


def test_each_call_shape_has_its_own_contest(two_fake_threads):
    a, b = slow_on(1, two_fake_threads), slow_on(2, two_fake_threads)
    for _ in range(1 + 2 * threads.PROBES):
        threads.fan_out(("bf16", (8, 8), 1), a)
        threads.fan_out(("bf16", (8, 8), 2), b)
    assert threads.choices() == {(("bf16", (8, 8), 1), 2): 2, (("bf16", (8, 8), 2), 2): 1}


def test_pinned_and_a_single_thread_cap_skip_the_contest(two_fake_threads, monkeypatch):
    kernel = slow_on(2, two_fake_threads)
    with threads.pinned(2):
        assert {threads.fan_out("k", kernel) for _ in range(10)} == {2}
    monkeypatch.setattr(threads, "pool_size", lambda: 1)
    assert {threads.fan_out("k", kernel) for _ in range(10)} == {1}
    assert threads.choices() == {}


def test_call_sizes_share_a_contest_by_bucket():
    assert [threads.bucket(m) for m in (1, 2, 8, 9, 16, 17, 128, 129)] == [1, 2, 8, 16, 16, 32, 128, 256]


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", ["bf16", "int8", "int4"])
def test_one_thread_and_the_pool_give_the_same_bits(reference, fmt):
    """Work is split over output rows, each element one fixed loop: the thread count cannot move a bit."""
    reference("numba")
    if threads.pool_size() < 2:
        pytest.skip(f"one usable thread here (pool {threads.pool_size()}): nothing to compare")
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3072, 1024), dtype=np.float32)
    layer = {
        "bf16": lambda: Bf16Linear(f32_to_bf16(w)),
        "int8": lambda: AffineLinear(quantize_affine(w, 8)),
        "int4": lambda: AffineLinear(quantize_affine(w, 4)),
    }[fmt]()
    for m in (1, 3, 40):
        x = rng.standard_normal((m, 1024), dtype=np.float32)
        with threads.pinned(1):
            one = layer.matmul(x)
        with threads.pinned(threads.pool_size()):
            many = layer.matmul(x)
        assert np.array_equal(one, many)
    from fs_model.cpu.attention import attend

    q = rng.standard_normal((3, 16, 5, 128), dtype=np.float32)
    K, V = (rng.standard_normal((3, 8, 300, 128), dtype=np.float32) for _ in range(2))
    with threads.pinned(1):
        one = attend(q, K, V, 300, np.float32(128**-0.5), np.array([0, 7, 290]))
    with threads.pinned(threads.pool_size()):
        many = attend(q, K, V, 300, np.float32(128**-0.5), np.array([0, 7, 290]))
    assert np.array_equal(one, many) and cpu.HAVE_NUMBA
