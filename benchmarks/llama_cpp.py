"""llama.cpp, the peer every CPU figure is measured against: built here, timed by its own tools.

    python benchmarks/llama_cpp.py [--cache DIR]      # build (once) and print the bin directory

The source is the vendored tree of a pinned llama-cpp-python sdist (llama.cpp commit 0c1e570), downloaded from
PyPI and checked against PyPI's SHA-256; it is built once with ``GGML_NATIVE=ON`` (the instructions this CPU has)
into ``DIR`` (``nox -s bench`` passes its own cache) and reused. llama.cpp is timed by ``llama-bench`` (prefill and
decode, batch 1) and ``llama-batched-bench`` (aggregate decode at several batch sizes), the figures llama.cpp users
quote; each process's peak RSS is its ``VmHWM``, polled from ``/proc/<pid>/status`` while it runs (``ru_maxrss``
survives ``exec``, so a child would report its parent's peak).
"""

import argparse
import hashlib
import json
import re
import subprocess
import tarfile
import time
import urllib.request
from pathlib import Path

VERSION = "0.3.36"  # llama-cpp-python; its vendor/llama.cpp is llama.cpp 0c1e570
TARGETS = ("llama-bench", "llama-batched-bench")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)


def build(cache: Path) -> Path:
    """The directory holding ``llama-bench`` and ``llama-batched-bench``, built on first use."""
    root = cache / f"llama-cpp-python-{VERSION}"
    bindir = root / "build" / "bin"
    if all((bindir / t).exists() for t in TARGETS):
        return bindir
    src = root / "src"
    if not (src / "vendor" / "llama.cpp" / "CMakeLists.txt").exists():
        _unpack(_download(cache), src)
    tree = src / "vendor" / "llama.cpp"
    subprocess.run(["cmake", "-S", tree, "-B", root / "build", "-G", "Ninja", *CMAKE_FLAGS], check=True)
    subprocess.run(["cmake", "--build", root / "build", "--target", *TARGETS, "-j2"], check=True)
    return bindir


def _download(cache: Path) -> Path:
    meta = json.load(urllib.request.urlopen(f"https://pypi.org/pypi/llama-cpp-python/{VERSION}/json", timeout=60))
    sdist = next(u for u in meta["urls"] if u["packagetype"] == "sdist")
    target = cache / sdist["filename"]
    if not target.exists() or hashlib.sha256(target.read_bytes()).hexdigest() != sdist["digests"]["sha256"]:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".part")
        with urllib.request.urlopen(sdist["url"], timeout=600) as r, open(tmp, "wb") as f:
            while chunk := r.read(1 << 20):
                f.write(chunk)
        if hashlib.sha256(tmp.read_bytes()).hexdigest() != sdist["digests"]["sha256"]:
            raise SystemExit(f"{sdist['url']}: SHA-256 does not match PyPI's")
        tmp.replace(target)
    return target


def _unpack(sdist: Path, dest: Path) -> None:
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(dest.parent, filter="data")
    (dest.parent / top).replace(dest)


def run_measured(argv: list[str]) -> tuple[str, int]:
    """(stdout, peak RSS in bytes) of one process, its VmHWM read until it exits."""
    p = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = 0
    while p.poll() is None:
        try:
            status = Path(f"/proc/{p.pid}/status").read_text()
            peak = max(peak, int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) * 1024)  # type: ignore[union-attr]
        except (OSError, AttributeError):
            pass
        time.sleep(0.02)
    out = p.stdout.read() if p.stdout else ""
    if p.returncode:
        raise RuntimeError(f"{argv[0]} exited {p.returncode}")
    return out, peak


def bench(bindir: Path, gguf: Path, prompt: int, decode: int, threads: int = 2) -> dict:
    """``llama-bench -p P -n N``, one repetition (callers interleave rounds and keep the best)."""
    out, rss = run_measured(
        [bindir / "llama-bench", "-m", gguf, "-p", prompt, "-n", decode, "-t", threads, "-r", 1, "-o", "json"]
    )
    rows = json.loads(out)
    pre = next(r["avg_ts"] for r in rows if r["n_prompt"] == prompt and r["n_gen"] == 0)
    dec = next(r["avg_ts"] for r in rows if r["n_gen"] == decode and r["n_prompt"] == 0)
    return {"prefill_tps": pre, "decode_tps": dec, "peak_rss": rss}


def batched(bindir: Path, gguf: Path, prompt: int, decode: int, batches: list[int], threads: int = 2) -> dict:
    """``llama-batched-bench``: aggregate decode tok/s (its S_TG column) per batch size."""
    npl = ",".join(map(str, batches))
    ctx = max(batches) * (prompt + decode) + 16
    out, _ = run_measured(
        [bindir / "llama-batched-bench", "-m", gguf, "-c", ctx, "-b", 2048, "-ub", 512, "-npp", prompt,
         "-ntg", decode, "-npl", npl, "-t", threads]
    )  # fmt: skip
    rates = {}
    for line in out.splitlines():  # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[2].isdigit():
            rates[int(cells[2])] = float(cells[7])
    return rates


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/fs-bench/llama.cpp")
    print(build(Path(ap.parse_args().cache)))
