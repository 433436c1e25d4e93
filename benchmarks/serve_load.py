"""The serve issue's benchmark: fs-serve, llama-server and mlx_lm.server on the same random Qwen3-0.6B weights,
driven by one load generator over the OpenAI streaming API, in one run.

    uv run --all-packages --all-extras --group bench --group parity python benchmarks/serve_load.py \\
        --llama-bin DIR [--formats bf16 int4] [--levels 1 4 8 16] [--new 128] [--out docs/data/serve_load.json]

Workload: at each concurrency level ``c``, ``c`` chat requests start together, each a shared ~300-token system
prompt plus its own question, greedy, ``--new`` tokens (EOS ignored where the server allows it: fs-serve and
llama-server take ``ignore_eos``). Per server and level: aggregate generated tok/s (all completion tokens over the
wall time from the first request to the last token), time to first token p50 / p95, and the p95 gap between
streamed chunks (one token per chunk on every server here). The system prompt is sent once before timing, so TTFT
is with it cached on the servers that cache across requests (fs-serve's prefix cache; llama-server's per-slot
cache; mlx_lm's prompt cache).

Equality: each prompt's greedy text at every level is compared with its text when sent alone to the same server;
``changed`` counts the prompts whose output differs (batch invariance as a user sees it).

Peers: ``llama-server -np 8`` (the GGUF of the same weights: BF16 for bf16, Q4_0 for int4) built by
benchmarks/llama_cpp.py; ``mlx_lm.server`` on MLX's CPU backend (bf16 only, levels up to ``--mlx-max-level``: it is
slow here, 0.9 tok/s at batch 1). Ratios are computed within this run; the machine is shared, so read them, not the
absolute rates.
"""

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from common import free_port

ROOT = Path(__file__).resolve().parents[1]
GGUF = {"bf16": "qwen3-0.6b-bf16.gguf", "int4": "qwen3-0.6b-q4_0.gguf"}
SYSTEM = (
    "You are a careful assistant for a team that maintains a Python library. Answer briefly, cite the module you "
    "mean, prefer the standard library, and never invent an API. "
) * 6


def model_dir(tokenizer: Path) -> Path:
    """The 0.6B bf16 random checkpoint with the Qwen3 tokenizer files beside it (every server needs them)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import CACHE, qwen3_06b

    src = qwen3_06b("bfloat16")
    d = CACHE / "qwen3-0.6b-bfloat16-serve"
    d.mkdir(exist_ok=True)
    for f in src.iterdir():
        if not (d / f.name).exists():
            (d / f.name).symlink_to(f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer / name, d / name)
    return d


class Peer:
    def __init__(self, name: str, argv: list[str], port: int, model: str, extra: dict):
        self.name, self.port, self.model, self.extra = name, port, model, extra
        self.url = f"http://127.0.0.1:{port}"
        self.ready_path = "/v1/models" if name == "mlx_lm.server" else "/health"  # fs and llama: 503 while loading
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.proc.returncode}: {' '.join(argv)}")
            try:
                if httpx.get(f"{self.url}{self.ready_path}", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{name} did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def one(client: httpx.AsyncClient, peer: Peer, question: str, new: int) -> dict:
    body = {
        "model": peer.model,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        "max_tokens": new,
        "temperature": 0,
        "stream": True,
        **peer.extra,
    }
    t0 = time.perf_counter()
    arrivals, text = [], []
    async with client.stream("POST", f"{peer.url}/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if not chunk.get("choices"):
                continue
            delta = chunk["choices"][0].get("delta", {})
            piece = delta.get("content") or ""
            if piece or delta.get("reasoning_content"):
                arrivals.append(time.perf_counter())
                text.append(piece)
    return {"start": t0, "arrivals": arrivals, "text": "".join(text), "tokens": len(arrivals)}


async def level(peer: Peer, c: int, new: int) -> tuple[dict, list[str]]:
    async with httpx.AsyncClient(timeout=3600) as client:
        asks = [one(client, peer, f"Question {i}: what does module {i} do?", new) for i in range(c)]
        runs = await asyncio.gather(*asks)
    t0 = min(r["start"] for r in runs)
    end = max(r["arrivals"][-1] for r in runs if r["arrivals"])
    ttft = [r["arrivals"][0] - r["start"] for r in runs if r["arrivals"]]
    gaps = [b - a for r in runs for a, b in zip(r["arrivals"], r["arrivals"][1:], strict=False)]
    row = {
        "aggregate_tps": sum(r["tokens"] for r in runs) / (end - t0),
        "ttft_p50": float(np.percentile(ttft, 50)),
        "ttft_p95": float(np.percentile(ttft, 95)),
        "itl_p95": float(np.percentile(gaps, 95)) if gaps else 0.0,
        "tokens": sum(r["tokens"] for r in runs),
    }
    return row, [r["text"] for r in runs]


def measure(peer: Peer, levels: list[int], new: int) -> dict:
    asyncio.run(level(peer, 1, 8))  # warm: load, compile, cache the system prompt
    out, texts = {}, {}
    for c in levels:
        row, texts[c] = asyncio.run(level(peer, c, new))
        print(f"  {peer.name} c={c}: {json.dumps({k: round(v, 3) for k, v in row.items()})}", flush=True)
        out[str(c)] = row

    async def alone(i: int) -> str:
        async with httpx.AsyncClient(timeout=3600) as client:
            return (await one(client, peer, f"Question {i}: what does module {i} do?", new))["text"]

    solo = [asyncio.run(alone(i)) for i in range(max(levels))]  # each prompt by itself: the reference
    changed = {str(c): sum(t != solo[i] for i, t in enumerate(texts[c])) for c in levels}
    print(f"  {peer.name} outputs changed by concurrency: {changed}", flush=True)
    return {"levels": out, "changed": changed}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", nargs="+", default=["bf16", "int4"], choices=list(GGUF))
    ap.add_argument("--levels", nargs="+", type=int, default=[1, 4, 8, 16])
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--llama-bin", help="directory with llama-server (benchmarks/llama_cpp.py)")
    ap.add_argument("--mlx-max-level", type=int, default=1)
    ap.add_argument("--no-mlx", action="store_true")
    ap.add_argument("--tokenizer", default=str(ROOT.parent / "shared" / "qwen3-tokenizer"))
    ap.add_argument("--out")
    args = ap.parse_args()
    levels = sorted(set(args.levels) | {1})
    d = model_dir(Path(args.tokenizer))
    results: dict = {}
    for fmt in args.formats:
        results[fmt] = {}
        port = free_port()
        fs = [sys.executable, "-m", "fs_serve.cli", "--model", str(d), "--port", str(port), "--max-batch", "16",
              "--kv-budget-mb", "1536", "--log-level", "warning"]  # fmt: skip
        if fmt == "int4":
            fs += ["--quantize", "int4"]
        peers = [("fs-serve", fs, port, str(d), {"ignore_eos": True})]
        if args.llama_bin:
            port = free_port()
            gguf = str(Path("/tmp/fs-bench") / GGUF[fmt])
            llama = [str(Path(args.llama_bin) / "llama-server"), "-m", gguf, "--port", str(port), "-np", "8",
                     "-c", str(8 * 1024), "-t", "2", "--no-warmup"]  # fmt: skip
            peers.append(("llama-server", llama, port, "qwen3", {"ignore_eos": True}))
        if fmt == "bf16" and not args.no_mlx:
            port = free_port()
            mlx = [sys.executable, "-m", "mlx_lm.server", "--model", str(d), "--port", str(port)]
            peers.append(("mlx_lm.server", mlx, port, str(d), {}))
        for name, argv, port, model, extra in peers:
            print(f"{fmt}: {name}", flush=True)
            peer = Peer(name, argv, port, model, extra)
            try:
                mine = levels if name != "mlx_lm.server" else [c for c in levels if c <= args.mlx_max_level]
                results[fmt][name] = measure(peer, mine, args.new)
            finally:
                peer.stop()
        fs_row = results[fmt]["fs-serve"]["levels"]
        if "llama-server" in results[fmt]:
            ll = results[fmt]["llama-server"]["levels"]
            results[fmt]["fs_vs_llama"] = {c: fs_row[c]["aggregate_tps"] / ll[c]["aggregate_tps"] for c in fs_row}
            results[fmt]["ttft_p50_fs_over_llama"] = {c: fs_row[c]["ttft_p50"] / ll[c]["ttft_p50"] for c in fs_row}
        print(fmt, json.dumps({k: v for k, v in results[fmt].items() if k.startswith(("fs_vs", "ttft"))}), flush=True)
    if args.out:
        body = {"date": time.strftime("%Y-%m-%d"), "new": args.new, "levels": levels, "results": results}
        Path(args.out).write_text(json.dumps(body, indent=1) + "\n")


if __name__ == "__main__":
    main()
