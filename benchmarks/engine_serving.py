"""The engine issue's benchmark: requests arriving at random over a shared system prompt, fs's Engine against the
same requests one by one through ``generate`` and against llama.cpp's batched decoding, same weights, one run.

    uv run --all-packages --group bench python benchmarks/engine_serving.py --llama-bin DIR \\
        [--formats bf16 int4] [--requests 32] [--system 512] [--new 128] [--max-batch 8]

Workload (the issue's): ``--requests`` requests, Poisson arrivals at ``--rate`` per second, each a ``--system``-token
shared system prompt plus a user part of 32-256 tokens (uniform), ``--new`` new tokens each (greedy, EOS off),
random weights with the real Qwen3-0.6B shapes. Reported per format:

- fs Engine (``max_batch`` = ``--max-batch``, block size 16, prefix cache on): aggregate generated tok/s over the
  whole run (first arrival to last token), time to first token p50 / p95 (arrival to first token);
- (a) one by one: ``generate`` on the first ``--solo`` requests, back to back (its rate is per request, so a few
  suffice), aggregate generated tok/s;
- (b) llama.cpp ``llama-batched-bench`` at the same concurrency on the GGUF of the same weights, prompts of the
  workload's mean length: ``-npl`` sequences each prefilled (no sharing), and ``-pps`` (the whole prompt shared - the
  most llama.cpp's tool can share). Its rate is pl·tg / total time: generated tokens over prefill + decode;
- TTFT of a lone request cold (fresh engine, nothing cached) vs warm (the system prompt's blocks cached), p50 of 5;
- the paged decode step at ``--long`` context over the step at 128 (one sequence, the engine's forward pass).

Ratios are computed within this run; the machine is shared, so read them, not the absolute rates.
"""

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

FORMATS = {"bf16": {}, "int8": {"quantize": "int8"}, "int4": {"quantize": "int4"}}
GGUF = {"bf16": "qwen3-0.6b-bf16.gguf", "int8": "qwen3-0.6b-q8_0.gguf", "int4": "qwen3-0.6b-q4_0.gguf"}


def workload(n: int, system: int, rate: float, seed: int = 0) -> tuple[list[list[int]], list[float]]:
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, 150000, system).tolist()
    prompts = [shared + rng.integers(0, 150000, int(rng.integers(32, 257))).tolist() for _ in range(n)]
    arrivals = np.cumsum(rng.exponential(1 / rate, n)).tolist()
    arrivals = [a - arrivals[0] for a in arrivals]
    return prompts, arrivals


def run_engine(model, prompts, arrivals, new, max_batch):
    from fs_generate import Engine

    engine = Engine(model, None, max_batch=max_batch, max_step_tokens=512)
    engine.start()
    handles, first = [], [0.0] * len(prompts)
    t0 = time.perf_counter()
    for _i, (p, a) in enumerate(zip(prompts, arrivals, strict=True)):
        time.sleep(max(0.0, a - (time.perf_counter() - t0)))
        handles.append((engine.submit(p, max_new_tokens=new, eos_token_ids=[]), time.perf_counter()))

    def watch(i, h, at):
        for _ in h.stream():
            first[i] = time.perf_counter() - at
            break

    watchers = [threading.Thread(target=watch, args=(i, h, at)) for i, (h, at) in enumerate(handles)]
    for w in watchers:
        w.start()
    results = [h.result() for h, _ in handles]
    wall = time.perf_counter() - t0
    for w in watchers:
        w.join()
    stats = engine.stats()
    engine.stop()
    tokens = sum(len(r.token_ids) for r in results)
    return {
        "aggregate_tps": tokens / wall,
        "ttft_p50": float(np.percentile(first, 50)),
        "ttft_p95": float(np.percentile(first, 95)),
        "wall_s": wall,
        "prefill_tokens": stats["prefill_tokens"],
        "cached_tokens": stats["cached_tokens"],
        "preempted": stats["preempted"],
        "forward_passes": stats["forward_passes"],
    }, [r.token_ids for r in results]


def run_solo(model, prompts, new):
    from fs_generate import generate

    t0 = time.perf_counter()
    out = [generate(model, None, p, max_new_tokens=new, eos_token_ids=[]) for p in prompts]
    rate = sum(len(g.token_ids) for g in out) / (time.perf_counter() - t0)
    return {"aggregate_tps": rate}, [g.token_ids for g in out]


def ttft_cold_warm(model, prompts):
    from fs_generate import Engine

    def first_token(engine, p):
        t0 = time.perf_counter()
        h = engine.submit(p, max_new_tokens=1, eos_token_ids=[])
        h.result()
        return time.perf_counter() - t0

    cold = [first_token(Engine(model, None, kv_budget_bytes=256 << 20), p) for p in prompts[1:6]]
    warm_engine = Engine(model, None, kv_budget_bytes=256 << 20)
    first_token(warm_engine, prompts[0])  # the system prompt's blocks, cached
    warm = [first_token(warm_engine, p) for p in prompts[1:6]]
    return {"ttft_cold_p50": float(np.median(cold)), "ttft_warm_p50": float(np.median(warm))}


def step_scaling(model, long: int) -> dict:
    """One sequence's decode step through the engine's paged forward pass at 128 and at ``long`` positions."""
    from step_scaling import step_ms

    out = {T: step_ms(model, T) for T in (128, long)}
    return {"step_128_ms": out[128], f"step_{long}_ms": out[long], "step_ratio": out[long] / out[128]}


def llama(bindir: Path, fmt: str, prompt: int, new: int, npl: int, tokenizer: Path) -> dict:
    sys.path.insert(0, "benchmarks")
    from llama_cpp import run_measured

    gguf = Path("/tmp/fs-bench") / GGUF[fmt]
    if not gguf.exists():  # the very weights fs runs, exported (cpu_speed.py shares the file)
        from common import qwen3_06b
        from export_gguf import export

        export(qwen3_06b("bfloat16"), gguf, GGUF[fmt].split("-")[-1].removesuffix(".gguf"), tokenizer)
    out = {}
    for name, extra in (("llama_no_share", []), ("llama_pps", ["-pps"])):
        ctx = npl * (prompt + new) + 64
        text, _ = run_measured(
            [bindir / "llama-batched-bench", "-m", gguf, "-c", ctx, "-npp", prompt, "-ntg", new, "-npl", npl,
             "-t", 2, "--output-format", "jsonl", *extra]
        )  # fmt: skip
        row = next(json.loads(line) for line in text.splitlines() if line.startswith("{"))
        out[name] = row["pl"] * row["tg"] / row["t"]
        out[name + "_decode_tps"] = row["speed_tg"]
    return out


def main() -> None:
    sys.path.insert(0, "benchmarks")
    from common import qwen3_06b

    from fs_model import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", nargs="+", default=["bf16", "int4"], choices=list(FORMATS))
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--system", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--rate", type=float, default=0.5, help="Poisson arrivals per second")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--solo", type=int, default=3, help="requests timed one by one (baseline a)")
    ap.add_argument("--long", type=int, default=4096)
    ap.add_argument("--llama-bin", help="directory with llama-batched-bench (benchmarks/llama_cpp.py)")
    ap.add_argument("--tokenizer", default=str(Path(__file__).resolve().parents[2] / "shared" / "qwen3-tokenizer"))
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    prompts, arrivals = workload(args.requests, args.system, args.rate)
    mean_prompt = int(np.mean([len(p) for p in prompts]))
    results = {}
    for fmt in args.formats:
        model = load_model(qwen3_06b("bfloat16"), **FORMATS[fmt])
        run_solo(model, [prompts[0][:40]], 4)  # compile / load the kernels before timing anything
        row, engine_ids = run_engine(model, prompts, arrivals, args.new, args.max_batch)
        solo, solo_ids = run_solo(model, prompts[: args.solo], args.new)
        assert engine_ids[: args.solo] == solo_ids, "the engine's output differs from generate's"
        row["one_by_one_tps"] = solo["aggregate_tps"]
        row.update(ttft_cold_warm(model, prompts))
        row.update(step_scaling(model, args.long))
        if args.llama_bin:
            row.update(llama(Path(args.llama_bin), fmt, mean_prompt, args.new, args.max_batch, Path(args.tokenizer)))
        row["vs_one_by_one"] = row["aggregate_tps"] / row["one_by_one_tps"]
        row["ttft_warm_speedup"] = row["ttft_cold_p50"] / row["ttft_warm_p50"]
        if args.llama_bin:
            row["vs_llama_no_share"] = row["aggregate_tps"] / row["llama_no_share"]
            row["vs_llama_pps"] = row["aggregate_tps"] / row["llama_pps"]
        results[fmt] = row
        print(fmt, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    body = {
        "date": time.strftime("%Y-%m-%d"),
        "workload": {
            "requests": args.requests,
            "system": args.system,
            "user": "32-256",
            "new": args.new,
            "rate": args.rate,
            "max_batch": args.max_batch,
            "mean_prompt": mean_prompt,
        },
        "results": results,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(body, indent=1) + "\n")


if __name__ == "__main__":
    main()
