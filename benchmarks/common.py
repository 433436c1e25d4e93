"""Helpers shared by the benchmark scripts: the 0.6B random checkpoint, peak RSS, a measured matmul peak, and talking
to a peer's server (a free port; a JSON request that waits while the server starts)."""

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from fs_weights import preset, write_random_checkpoint

CACHE = Path("/tmp/fs-bench")


def qwen3_06b(dtype: str = "float32", tokenizer: str | None = None) -> Path:
    d = CACHE / f"qwen3-0.6b-{dtype}"
    if not (d / "config.json").exists():
        t0 = time.perf_counter()
        write_random_checkpoint(d, preset("qwen3-0.6b"), dtype=dtype, tokenizer=tokenizer)
        print(f"wrote {d} in {time.perf_counter() - t0:.0f}s")
    return d


def peak_rss() -> int:
    """VmHWM of this process in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def matmul_peak_gflops(n: int = 1024, m: int = 3072, k: int = 1024, repeat: int = 5) -> float:
    """Best float32 GEMM rate numpy's BLAS reaches here on a prefill-like shape [n,k] @ [k,m]."""
    a = np.random.default_rng(0).standard_normal((n, k), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((k, m), dtype=np.float32)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n * m * k / best / 1e9


def prefill_flops(
    S: int, H: int = 1024, L: int = 28, q: int = 2048, kv: int = 1024, inter: int = 3072, V: int = 151936
) -> float:
    """Matmul FLOPs of one prefill of S tokens (attention scores included, logits for the last position only)."""
    per_layer = 2 * S * H * (q + 2 * kv) + 2 * S * q * H + 2 * S * H * inter * 3 + 2 * 2 * S * S * q / 2
    return L * per_layer + 2 * H * V


def read_bandwidth_gbs(nbytes: int = 1 << 30, repeat: int = 3) -> float:
    """Single-thread streaming read rate: sum over a 1 GiB float32 array (the batch-1 decode limit's unit)."""
    a = np.ones(nbytes // 4, dtype=np.float32)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def read_bandwidth_gbs_all_cores(nbytes: int = 1 << 30, repeat: int = 5) -> float:
    """The same streaming read with every core (numba, parallel over blocks): what a decode kernel can reach."""
    from numba import njit, prange

    @njit(parallel=True, fastmath=True)
    def total(a: np.ndarray) -> float:
        n = a.shape[0] // 64
        parts = np.zeros(64, np.float32)
        for b in prange(64):
            seg = a[b * n : (b + 1) * n]  # a slice from 0: numba vectorises range(len), not range(lo, hi)
            s = np.float32(0.0)
            for j in range(seg.shape[0]):
                s += seg[j]
            parts[b] = s
        return parts.sum()

    a = np.ones(nbytes // 4, dtype=np.float32)
    total(a)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        total(a)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server(cmd: list[str], port: int) -> Iterator["subprocess.Popen[bytes]"]:
    """A peer's server process (``cmd`` already names ``port``), output discarded, stopped on the way out."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)


def post_json(port: int, path: str, body: dict[str, Any], proc: "subprocess.Popen[bytes]", wait_s: float = 60) -> Any:
    """POST ``body`` to a server on 127.0.0.1 that ``proc`` is starting; retried until it answers or exits."""
    data, name = json.dumps(body).encode(), Path(str(proc.args[0])).name  # type: ignore[index]
    deadline = time.monotonic() + wait_s
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited ({proc.returncode}) before answering")
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
            return json.load(urllib.request.urlopen(req, timeout=120))
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} did not answer within {wait_s:.0f} s") from None
            time.sleep(0.2)
