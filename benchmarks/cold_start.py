"""Cold start: what a new user waits for on a fresh clone - the README's main job and fs-serve's first request.

    uv run python benchmarks/cold_start.py [--preset qwen3-0.6b] [--out docs/data/cold_start.json]

A ``git clone`` of this checkout's HEAD into a temporary directory, ``uv sync --locked`` there (timed, reported
apart: it is the install, not the start), then, with the clone's compile caches empty (numba writes them beside
the sources, in the clone's own ``__pycache__``):

1. the README's main job, ``fs-generate --prompt "The with statement"`` on the demo model: cold, then warm;
2. ``fs-generate --model DIR`` on a random bf16 checkpoint (``--preset``, byte tokenizer): the CPU kernels compile on
   this first run, and the one stderr line that says so is looked for; then warm;
3. ``fs-serve`` on the demo and on that checkpoint: seconds from the command to ``/health`` 200, then the same
   greedy request (32 new tokens) three times. The figure is first / warm (the best of the second and third):
   1.0 means the first client waits no longer than any other.

The peer is the warm run of the same command in the same clone, so the ratios say what a first run costs.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ["uv", "run", "--locked", "--package", "fs-generate", "fs-generate", "--prompt", "The with statement"]
NOTICE = "compiling CPU kernels"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, out.stderr


def serve(cwd: Path, env: dict[str, str], model: list[str]) -> dict[str, float]:
    """Start fs-serve, time it to /health 200, then one request three times; stop it."""
    port = free_port()
    cmd = ["uv", "run", "--locked", "--package", "fs-serve", "fs-serve", "--port", str(port), *model]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"fs-serve exited with {proc.returncode} before /health said ok")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        ready = time.perf_counter() - t0
        body = {"prompt": "The with statement", "max_tokens": 32, "temperature": 0}
        times = []
        for _ in range(3):
            t = time.perf_counter()
            httpx.post(url + "/v1/completions", json=body, timeout=600).raise_for_status()
            times.append(time.perf_counter() - t)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    warm = min(times[1:])
    return {"ready_s": ready, "first_s": times[0], "warm_s": warm, "first_over_warm": times[0] / warm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="qwen3-0.6b", help="fs_weights preset of the random bf16 checkpoint")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("VIRTUAL_ENV", None)  # the clone's own environment, not this one
    result: dict[str, object] = {"date": time.strftime("%Y-%m-%d"), "host": host()}
    with tempfile.TemporaryDirectory(prefix="fs-cold-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        t, _ = timed(["uv", "sync", "--locked", "--all-packages"], clone, env)
        result["uv_sync_s"] = t
        cold, err = timed(MAIN_JOB, clone, env)
        warm, _ = timed(MAIN_JOB, clone, env)
        result["demo"] = {"cold_s": cold, "warm_s": warm, "notice": NOTICE in err}
        ckpt = Path(tmp) / "bf16"
        random = ["uv", "run", "--locked", "--package", "fs-weights", "fs-weights", "random", str(ckpt)]
        subprocess.run(
            [*random, "--preset", args.preset, "--tokenizer", "bytes", "--quiet"],
            cwd=clone,
            env=env,
            check=True,
            capture_output=True,
        )
        job = [*MAIN_JOB, "--model", str(ckpt), "-m", "32"]
        cold, err = timed(job, clone, env)
        warm, _ = timed(job, clone, env)
        result["bf16"] = {"cold_s": cold, "warm_s": warm, "notice": NOTICE in err}
        subprocess.run(["find", str(clone), "-name", "*.nb[ic]", "-delete"], check=True)  # cold again for fs-serve
        result["serve_bf16"] = serve(clone, env, ["--model", str(ckpt)])
        result["serve_demo"] = serve(clone, env, [])
    print(json.dumps(result, indent=2))
    lines = {
        "demo": "fs-generate demo: cold {cold_s:.1f} s, warm {warm_s:.1f} s, compile line: {notice}",
        "bf16": "fs-generate bf16: cold {cold_s:.1f} s, warm {warm_s:.1f} s, compile line: {notice}",
        "serve_demo": "fs-serve demo: /health ok after {ready_s:.1f} s; "
        "first {first_s:.2f} s, warm {warm_s:.2f} s ({first_over_warm:.2f}x)",
        "serve_bf16": "fs-serve bf16: /health ok after {ready_s:.1f} s; "
        "first {first_s:.2f} s, warm {warm_s:.2f} s ({first_over_warm:.2f}x)",
    }
    for name, line in lines.items():
        print(line.format(**result[name]))  # type: ignore[arg-type]
    if args.out:
        tmp_out = args.out.with_suffix(".tmp")
        tmp_out.write_text(json.dumps(result, indent=2) + "\n")
        tmp_out.replace(args.out)


def host() -> str:
    name = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "unknown CPU",
    )
    isa = "AVX-512" if " avx512f" in Path("/proc/cpuinfo").read_text() else "AVX2"
    return f"{name}, {os.cpu_count()} cores, {isa}"


if __name__ == "__main__":
    sys.exit(main())
