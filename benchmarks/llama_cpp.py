"""llama.cpp, the peer every CPU figure is measured against: built here, timed by its own tools.

    python benchmarks/llama_cpp.py [--cache DIR] [--isa avx2]     # build (once) and print the bin directory

The source is the vendored tree of a pinned llama-cpp-python sdist (llama.cpp commit 0c1e570), found through
PyPI's simple index and checked against the SHA-256 pinned below; it is built once with ``GGML_NATIVE=ON`` (the
instructions this CPU has) into ``DIR`` (``nox -s bench`` passes its own cache) and reused. llama.cpp is timed by
``llama-bench`` (prefill and decode, batch 1) and ``llama-batched-bench`` (aggregate decode at several batch sizes),
the figures llama.cpp users quote; ``llama-quantize`` makes the K-quant files (Q4_K_M, Q5_K_M, Q6_K) fs must
read as llama.cpp writes them; each process's peak RSS is its ``VmHWM``, polled from ``/proc/<pid>/status``
while it runs (``ru_maxrss`` survives ``exec``, so a child would report its parent's peak).
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
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # PyPI's, pinned here
TARGETS = ("llama-bench", "llama-batched-bench", "llama-server", "llama-quantize")  # llama-quantize: K-quant files
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    # no AMX: on this project's Sapphire Rapids VM (cpuid and the kernel both offer it) llama.cpp's AMX matmul dies
    # with SIGILL on Q8_0 / Q4_0 weights (2026-12-02, in ggml_backend_amx_mul_mat); fs has no AMX kernel either, so
    # both sides run AVX-512 there. Elsewhere these flags change nothing.
    "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
)


# llama.cpp as an AVX2-only host runs it (``--isa avx2``): the AVX2 host kind's proxy on an AVX-512 machine, beside
# fs under FS_ISA=avx2 (the same instructions for both; the memory system stays this machine's)
AVX2_FLAGS = tuple(f"-DGGML_{f}" for f in ("NATIVE=OFF", "AVX=ON", "AVX2=ON", "FMA=ON", "F16C=ON", "BMI2=ON"))


def build(cache: Path, isa: str = "native") -> Path:
    """The directory holding ``TARGETS`` (llama-bench, llama-batched-bench, llama-server, llama-quantize), built on
    first use; ``isa="avx2"``: llama-bench and llama-batched-bench without AVX-512, in a directory of their own."""
    root = cache / f"llama-cpp-python-{VERSION}-noamx"  # the source lives here for both builds
    flags, targets, out = CMAKE_FLAGS, TARGETS, root / "build"
    if isa == "avx2":
        flags = tuple(f for f in CMAKE_FLAGS if f != "-DGGML_NATIVE=ON") + AVX2_FLAGS
        targets, out = TARGETS[:2], cache / f"llama-cpp-python-{VERSION}-avx2" / "build"
    bindir = out / "bin"
    if all((bindir / t).exists() for t in targets):
        return bindir
    src = root / "src"
    if not (src / "vendor" / "llama.cpp" / "CMakeLists.txt").exists():
        _unpack(_download(cache), src)
    tree = src / "vendor" / "llama.cpp"
    subprocess.run(["cmake", "-S", tree, "-B", out, "-G", "Ninja", *flags], check=True)
    subprocess.run(["cmake", "--build", out, "--target", *targets, "-j2"], check=True)
    return bindir


def _download(cache: Path) -> Path:
    target = cache / SDIST
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == SHA256:
        return target
    index = urllib.request.Request(
        "https://pypi.org/simple/llama-cpp-python/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    files = json.load(urllib.request.urlopen(index, timeout=60))["files"]
    url = next(f["url"] for f in files if f["filename"] == SDIST)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".part")
    with urllib.request.urlopen(url, timeout=600) as r, open(tmp, "wb") as f:
        while chunk := r.read(1 << 20):
            f.write(chunk)
    if hashlib.sha256(tmp.read_bytes()).hexdigest() != SHA256:
        tmp.unlink()
        raise SystemExit(f"{url}: SHA-256 is not the pinned {SHA256}")
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
    """``llama-bench``, one repetition (callers interleave rounds and keep the best): prefill of ``prompt`` tokens
    (``-p``), ``decode`` steps after a prompt of ``prompt`` tokens (``-n -d``: the context fs and mlx-lm decode at) and
    from an empty cache (tg at depth 0, llama-bench's usual figure)."""
    cmd = [bindir / "llama-bench", "-m", gguf, "-t", threads, "-r", 1, "-o", "json"]
    out, rss = run_measured([*cmd, "-p", prompt, "-n", decode])
    deep, rss_deep = run_measured([*cmd, "-p", 0, "-n", decode, "-d", prompt])
    rows = json.loads(out)
    pre = next(r["avg_ts"] for r in rows if r["n_prompt"] == prompt and r["n_gen"] == 0)
    d0 = next(r["avg_ts"] for r in rows if r["n_gen"] == decode and r["n_prompt"] == 0)
    dec = next(r["avg_ts"] for r in json.loads(deep) if r["n_gen"] == decode and r.get("n_depth") == prompt)
    return {"prefill_tps": pre, "decode_tps": dec, "decode_d0_tps": d0, "peak_rss": max(rss, rss_deep)}


def batched(bindir: Path, gguf: Path, prompt: int, decode: int, batches: list[int], threads: int = 2) -> dict:
    """``llama-batched-bench``: aggregate decode tok/s (its S_TG, ``speed_tg``) per batch size."""
    ctx = max(batches) * (prompt + decode) + 16
    out, _ = run_measured(
        [bindir / "llama-batched-bench", "-m", gguf, "-c", ctx, "-npp", prompt, "-ntg", decode,
         "-npl", ",".join(map(str, batches)), "-t", threads, "--output-format", "jsonl"]
    )  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["pl"]: r["speed_tg"] for r in rows}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/fs-bench/llama.cpp")
    ap.add_argument("--isa", default="native", choices=("native", "avx2"))
    args = ap.parse_args()
    print(build(Path(args.cache), args.isa))
