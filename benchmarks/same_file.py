"""fs and ``llama-bench`` on the very same GGUF files, rounds interleaved, each engine's best round kept: the loop
and the table that kquant_speed.py and moe_speed.py share."""

import sys

from cpu_speed import FS, keep_best, run  # the fs timing code of the main CPU table
from llama_cpp import bench

# decode after the prompt for both (llama-bench -d), and the ratio from an empty cache (llama_cpp.bench)
HEAD = "| {0} | fs prefill tok/s | llama-bench | ratio | fs decode tok/s | llama-bench | ratio | from empty | {1} |"


def interleaved(files: dict, llama_bin, S: int, N: int, rounds: int, variants: dict | None = None) -> dict[str, dict]:
    """``files``: label -> GGUF path. Returns "fs LABEL" / "llama.cpp LABEL" -> that engine's best round, and for
    each of ``variants`` (name -> environment switches) "NAME LABEL": fs run under those switches, in the same
    rounds."""
    best: dict[str, dict] = {}
    for r in range(rounds):
        for label, f in files.items():
            print(f"round {r + 1}/{rounds}: {label}", flush=True)
            for name, env in {"fs": {}, **(variants or {})}.items():
                got = run(sys.executable, FS, f, "native", "-", S, N, env=env)
                if got is not None:
                    keep_best(best, f"{name} {label}", got)
            keep_best(best, f"llama.cpp {label}", bench(llama_bin, f, S, N))
    return best


def table(files: dict, best: dict[str, dict], first: str, last: str, extra) -> None:
    """One row per file: tok/s and fs ÷ llama.cpp; ``extra(label, fs_row, llama_row)`` fills the last column."""
    print(HEAD.format(first, last))
    print("|---|---|---|---|---|---|---|---|---|")
    for label in files:
        a, b = best.get(f"fs {label}"), best[f"llama.cpp {label}"]
        if a is None:
            print(f"| {label} | failed | {b['prefill_tps']:.1f} | | failed | {b['decode_tps']:.2f} | | | |")
            continue
        print(
            f"| {label} | {a['prefill_tps']:.1f} | {b['prefill_tps']:.1f} | {a['prefill_tps'] / b['prefill_tps']:.2f}× "
            f"| {a['decode_tps']:.2f} | {b['decode_tps']:.2f} | {a['decode_tps'] / b['decode_tps']:.2f}× "
            f"| {a['decode_d0_tps'] / b['decode_d0_tps']:.2f}× | {extra(label, a, b)} |"
        )
