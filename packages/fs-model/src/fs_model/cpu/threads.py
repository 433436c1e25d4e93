"""How many threads a kernel call fans out to, decided by timing the calls themselves, per call shape.

Why measure: on this machine's two cores a 0.6B decode matrix runs 1.6-1.9× faster on both threads than on one
while the machine is quiet, and up to 1.3× *slower* on both while another process keeps one core busy; a whole
0.6B bf16 decode step then runs at 3.2 tok/s on two threads against 6.7 on one (``benchmarks/threads.py``,
``--busy`` puts a busy loop beside it). No fixed rule is right on a shared machine, so every call shape keeps its
own contest: its first calls alternate between one thread and the whole pool, the faster of the two (by the total
of ``PROBES`` timed calls each) is used from then on, and every ``REPROBE`` calls the contest is run again, so a
change of load is noticed within a few dozen decode steps (a 0.6B decode step makes 28 calls of each shape).

The choice cannot change a result: every parallel kernel splits its work over output rows (or over heads), each
output element computed by one thread in one fixed loop, so one thread and two give the same bits (tested).

    fan_out(("bf16", w.shape, m), kernel, w, X, out)   # = kernel(w, X, out) on the thread count that won

There is one pool: numba's. OpenBLAS (the float32 reference path) keeps its own, capped by ``set_threads`` too.
"""

import threading
import time
import types
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from . import HAVE_NUMBA, SWITCHES

if HAVE_NUMBA:
    import numba

# Timed calls per side of a contest (a shape's first call is a warm-up, untimed). Totals, not best-of or medians:
# beside a busy process the pool's calls are usually fast but one in five or so stalls 3-8 ms while a thread
# waits for its core (measured), and only the total counts those stalls.
PROBES = 8
REPROBE = 1024  # calls between contests
# Elementwise work of at least this many floats (a prompt's norms, RoPE, SiLU, its activations' rounding or
# quantization) is split over the pool by rows; less (a decode step's few rows) stays on the calling thread, where
# waking the pool would cost more than the work. At a 0.6B bf16 prefill of 512 tokens (Zen 5, 2026-12-07) that
# serial work was ~1.5 ms a layer (RMSNorm 0.28, q/k norm + RoPE 0.72, SiLU 0.31, rounding), one core idle through
# it; with the tile tree, prefill-512 1.05-1.10x (docs/performance.md).
PARALLEL_FLOATS = 1 << 16


class _Contest:
    __slots__ = ("calls", "choice", "probes", "times")

    def __init__(self) -> None:
        self.times: tuple[list[int], list[int]] = ([], [])  # ns on one thread, on the pool
        self.probes = -1  # -1: the next call is the warm-up (compilation, cold caches)
        self.choice = 0  # 0 while contesting, else the winning thread count
        self.calls = 0


_contests: dict[Hashable, _Contest] = {}
_local = threading.local()  # per calling thread (numba's thread count is per thread too): .set, .pinned


def bucket(m: int) -> int:
    """Call sizes that share a contest: exact up to 8 (decode batches), then the next power of two."""
    return m if m <= 8 else 1 << (m - 1).bit_length()


def pool_size() -> int:
    """The most threads a call may use: numba's pool, capped by ``FS_NUM_THREADS`` / ``set_threads``."""
    if not HAVE_NUMBA:
        return 1
    n = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    return min(n, SWITCHES.num_threads) if SWITCHES.num_threads else n


def _use(n: int) -> None:
    if getattr(_local, "set", None) != n:
        numba.set_num_threads(n)  # type: ignore[attr-defined]
        _local.set = n


def fan_out(key: Hashable, kernel: Callable[..., Any], *args: Any) -> Any:
    """``kernel(*args)`` on one thread or on the pool, whichever has been faster for calls of this ``key``."""
    pinned = getattr(_local, "pinned", None)
    T = pool_size()
    if pinned is not None or T == 1:
        _use(min(pinned or 1, T))
        return kernel(*args)
    key = (key, T)
    c = _contests.get(key)
    if c is None:
        c = _contests.setdefault(key, _Contest())
    if c.choice:
        c.calls += 1
        if c.calls >= REPROBE:
            c.choice, c.probes, c.times = 0, 0, ([], [])
        _use(c.choice or 1)
        return kernel(*args)
    side = c.probes % 2 if c.probes >= 0 else 1
    _use(T if side else 1)
    t0 = time.perf_counter_ns()
    out = kernel(*args)
    dt = time.perf_counter_ns() - t0
    if c.probes >= 0:
        c.times[side].append(dt)
    c.probes += 1
    if c.probes >= 2 * PROBES:
        one, pool = (sum(t) for t in c.times)
        c.choice = T if pool < one else 1  # a tie goes to one thread: it leaves the other core free
        c.calls = 0
    return out


def both(impl: Callable[..., Any], **options: Any) -> tuple[Any, Any]:
    """(serial, parallel): ``impl``, whose rows are a ``prange``, compiled to run on the calling thread and over the
    pool (numba's ``options`` for both). Each row's arithmetic is the same loop in both, so which one ran never
    shows in a bit (tests/test_fused.py); callers take the parallel one from ``PARALLEL_FLOATS`` floats.

    The parallel one compiles a copy of ``impl`` under its own name: numba's disk cache files a function by module
    and name, not by its compile options, so two dispatchers of one function would load each other's machine code
    (the "parallel" one ran on one thread, found by the test)."""
    twin = types.FunctionType(impl.__code__, impl.__globals__, impl.__name__ + "_parallel", impl.__defaults__)
    twin.__qualname__ = impl.__qualname__ + "_parallel"
    return numba.njit(cache=True, **options)(impl), numba.njit(parallel=True, cache=True, **options)(twin)


def choices() -> dict[Hashable, int]:
    """What each decided call shape runs on now (for benchmarks and tests)."""
    return {k: c.choice for k, c in _contests.items() if c.choice}


@contextmanager
def pinned(n: int) -> Iterator[None]:
    """Every kernel call on this thread runs on exactly ``min(n, pool_size())`` threads, no contest (benchmarks
    comparing thread counts; tests proving the count does not change a bit)."""
    before = getattr(_local, "pinned", None)
    _local.pinned = n
    try:
        yield
    finally:
        _local.pinned = before


def forget() -> None:
    """Drop every decision (the next calls contest again)."""
    _contests.clear()
