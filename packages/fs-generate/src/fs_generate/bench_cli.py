"""``fs-bench``: prompt-processing and generation speed of a model, in ``llama-bench``'s table.

fs-bench --model Qwen/Qwen3-0.6B -p 512 -n 128 -t 1,2 -b 1,8

Each test is timed ``--repetitions`` times after one warm-up run; the table shows mean ± standard deviation, so
fs's rows can be pasted under llama-bench's for the same model file. ``ppN``: one prompt of N random tokens
prefilled from an empty cache (``PREFILL_CHUNK`` tokens per forward pass, as generation prefills); ``tgN``: N
tokens decoded one forward pass at a time from an empty cache, no sampling (as llama-bench); ``tgN bB``: B
sequences decoded together, one forward pass of B tokens per step, t/s counting every sequence's tokens.
"""

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fs_weights import Checkpoint
from fs_weights.command_line import run_main

from . import __version__
from .cli import KNOWN_ERRORS
from .errors import GenerateError
from .model_flags import add_model_flags, load_from_args, parameter_count
from .step import PREFILL_CHUNK, last_logits, tokens_for


def _counts(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"values must be >= 0, got {text!r}")
    return values


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fs-bench", description="Measure prefill and decode speed (llama-bench's table).")
    add_model_flags(ap, peer="llama.cpp")
    ap.add_argument("-p", "--n-prompt", type=_counts, default=[512], help="prompt lengths (default 512; 0 = none)")
    ap.add_argument("-n", "--n-gen", type=_counts, default=[128], help="generated lengths (default 128; 0 = none)")
    ap.add_argument("-t", "--thread-counts", type=_counts, help="thread counts to compare (default: --threads)")
    ap.add_argument(
        "-b",
        "--batch-size",
        type=_counts,
        default=[PREFILL_CHUNK],
        help=f"llama-bench's: tokens per prefill pass (default {PREFILL_CHUNK}, as generation prefills)",
    )
    ap.add_argument(
        "-np", "--parallel", type=_counts, default=[1], help="sequences decoded together (default 1): rows tgN npB"
    )
    ap.add_argument("-r", "--repetitions", type=int, default=5, help="timed runs per test (default 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per test instead of the table")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random token ids")
    ap.add_argument("--version", action="version", version=f"fs-bench {__version__}")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run_main("fs-bench", lambda: _run(args), KNOWN_ERRORS)


# --- the measurements -----------------------------------------------------------------------------------------


def prefill_seconds(model: Any, ids: list[int], chunk: int = PREFILL_CHUNK) -> float:
    caches = model.make_cache()
    t0 = time.perf_counter()
    for at in range(0, len(ids), chunk):
        like = caches[0].key_values[0] if at else None
        out = model(tokens_for(model, [ids[at : at + chunk]], like), at, caches, logits_to_keep=1)
    last_logits(out)  # the result on the host: MLX has computed it
    return time.perf_counter() - t0


def decode_seconds(model: Any, rows: list[list[int]]) -> float:
    """Feed ``rows[b][i]`` at position i for every row together; the seconds of all but the first step."""
    caches = model.make_cache()
    t0 = 0.0
    for i in range(len(rows[0])):
        if i == 1:
            t0 = time.perf_counter()  # the first step (an empty cache) is not a decode step
        like = caches[0].key_values[0] if i else None
        last_logits(model(tokens_for(model, [[r[i]] for r in rows], like), i, caches, logits_to_keep=1))
    return time.perf_counter() - t0


def timed(run: Callable[[], float], tokens: int, repetitions: int) -> list[float]:
    run()  # warm-up: compilation, first-touch of the weights
    return [tokens / run() for _ in range(repetitions)]


# --- the table ------------------------------------------------------------------------------------------------


SIZE_WORDS = {"S": "Small", "M": "Medium", "L": "Large"}


def gguf_kind(file_type: Any) -> str | None:
    """llama.cpp's name for a GGUF's ``general.file_type`` (llama_model_ftype_name): 15 -> "Q4_K - Medium"."""
    from gguf import LlamaFileType

    try:
        name = LlamaFileType(int(file_type)).name
    except (TypeError, ValueError):
        return None
    if name == "ALL_F32":
        return "all F32"
    name = name.removeprefix("MOSTLY_")
    if name == "Q2_K":
        return "Q2_K - Medium"
    head, _, size = name.rpartition("_")
    return f"{head} - {SIZE_WORDS[size]}" if "_K" in head and size in SIZE_WORDS else name


def describe(path: Any, model: Any) -> dict[str, Any]:
    """llama-bench's model columns: "qwen3 0.6B BF16", size in GiB of the stored weights, parameters. A GGUF file
    is described as llama-bench describes it: its own size on disk and its file type's name."""
    params = parameter_count(model.config)
    with Checkpoint.open(path) as ck:
        size = ck.nbytes
        codes = {ck.info(n).dtype for n in ck.names()}
        q = ck.quantization
        meta = getattr(ck.files[0], "metadata", None)  # a GGUFFile's header keys
    kind = f"Q{q['bits']}" if q else "BF16" if "BF16" in codes else "F16" if "F16" in codes else "F32"
    if meta is not None:
        size = os.path.getsize(path)
        kind = gguf_kind(meta.get("general.file_type")) or kind
    scale = f"{params / 1e9:.1f}B" if params >= 1e8 else f"{params / 1e6:.0f}M"
    return {"model": f"qwen3 {scale} {kind}", "size": size, "params": params}


def row_md(r: dict[str, Any]) -> str:
    cells = [r["model"], f"{r['size'] / 1024**3:.2f} GiB", f"{r['params'] / 1e6:.2f} M", r["backend"],
             str(r["threads"]), r["test"], f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}"]  # fmt: skip
    return "| " + " | ".join(f"{c:>{w}}" if i in (1, 2, 4, 5, 6) else f"{c:<{w}}" for i, (c, w) in
                             enumerate(zip(cells, WIDTHS, strict=True))) + " |"  # fmt: skip


HEADER = ["model", "size", "params", "backend", "threads", "test", "t/s"]
WIDTHS = [30, 10, 10, 10, 7, 13, 20]


def _warn_outliers(test: str, rates: list[float]) -> None:
    """One stderr note where a mean would mislead: a run under half the median (a busy host: rerun), or a single run
    (its ± 0.00 is not a measured spread)."""
    if len(rates) == 1:
        print(f"note: {test}: one run (-r 1), so ± 0.00 is not a measured spread", file=sys.stderr)
        return
    mid = statistics.median(rates)
    slow = [r for r in rates if r < mid / 2]
    if slow:
        print(f"note: {test}: {len(slow)} of {len(rates)} runs under half the median ({min(slow):.2f} against "
              f"{mid:.2f} t/s): something else was using the CPU; rerun", file=sys.stderr)  # fmt: skip


def _run(args: argparse.Namespace) -> int:
    if args.repetitions < 1:
        raise GenerateError("--repetitions must be at least 1")
    if not any(args.n_prompt) and not any(args.n_gen):
        raise GenerateError("nothing to measure: every -p and -n is 0")
    if any(b < 1 for b in args.batch_size):
        raise GenerateError("-b/--batch-size: every batch size must be at least 1")
    if any(b < 1 for b in args.parallel):
        raise GenerateError("-np/--parallel: every count of sequences must be at least 1")
    threads = args.thread_counts or [args.threads or len(os.sched_getaffinity(0))]
    args.quiet = args.quiet or args.json
    model, _ = load_from_args(args)
    info = describe(model.path, model)
    rng = np.random.default_rng(args.seed)
    V = model.config.vocab_size
    limit = model.config.max_position_embeddings
    if max(args.n_prompt) > limit or max(args.n_gen) + 1 > limit:
        raise GenerateError(f"a test is longer than the model's context of {limit} tokens")
    out = sys.stdout
    if not args.json:
        print("| " + " | ".join(f"{h:<{w}}" for h, w in zip(HEADER, WIDTHS, strict=True)) + " |", file=out)
        print("| " + " | ".join("-" * (w - 1) + (":" if i in (1, 2, 4, 5, 6) else "-") for i, w in
                                enumerate(WIDTHS)) + " |", file=out)  # fmt: skip
    tests: list[tuple[str, Callable[[], float], int]] = []
    for n in args.n_prompt:
        if n:
            ids = rng.integers(0, V, n).tolist()
            for b in args.batch_size:  # llama-bench names a non-default batch size in its own column; fs in the test
                name = f"pp{n}" + (f" b{b}" if len(args.batch_size) > 1 or b != PREFILL_CHUNK else "")
                tests.append((name, functools.partial(prefill_seconds, model, ids, b), n))
    for n in args.n_gen:
        for b in args.parallel if n else ():
            rows = rng.integers(0, V, (b, n + 1)).tolist()
            name = f"tg{n}" + (f" np{b}" if b > 1 else "")
            tests.append((name, functools.partial(decode_seconds, model, rows), n * b))
    backend = "MLX" if model.backend == "mlx" else "CPU"
    for t in threads:
        if model.backend != "mlx":
            from fs_model.cpu import set_threads

            set_threads(t)
        for name, run, tokens in tests:
            rates = timed(run, tokens, args.repetitions)
            spread = statistics.stdev(rates) if len(rates) > 1 else 0.0
            r = info | {"backend": backend, "threads": t, "test": name, "avg_ts": statistics.fmean(rates),
                        "stddev_ts": spread, "samples_ts": rates}  # fmt: skip
            print(json.dumps(r) if args.json else row_md(r), file=out, flush=True)
            _warn_outliers(name, rates)
    if not args.json:
        print(f"\nbuild: fs-generate {__version__}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
