"""The K-quant files Qwen3 users download, timed: fs against ``llama-bench`` on the very same GGUF file.

    uv run nox -s bench -- kquant_speed      # or, with llama.cpp built (benchmarks/llama_cpp.py):
    uv run --all-packages --all-extras --group parity --group bench python benchmarks/kquant_speed.py --llama-bin DIR

The random checkpoint with Qwen3-0.6B's shapes (bf16, Qwen3's real vocabulary) is written as a BF16 GGUF by
``fs-convert-gguf``, then ``llama-quantize`` makes the Q4_K_M, Q5_K_M and Q6_K files llama.cpp users run. Each file
is loaded by fs as it is (``dtype="native"``: Q4_K on the 4-bit kernels, Q5_K and Q6_K packed in 5 and 6 bits,
exact repacks of the file's codes, their scales read from the K-quants' super-block records) and timed by ``llama-bench
-p P -n N -t 2``; prefill P and decode N, every engine in its own process, rounds interleaved, each engine's best
round kept (this machine moves ±20 % run to run). fs also runs with ``FS_SUPERBLOCK_SCALES=0`` (float32 scales and
biases per group: the same bits, more bytes) in the same rounds. Printed: tok/s, fs ÷ llama.cpp, the bytes each
engine reads for the weights per decode step (fs: codes plus records or scales and biases; llama.cpp: the file's
tensor bytes), and records ÷ expanded.
"""

import argparse
import subprocess
import sys
from pathlib import Path

from fs_generate.gguf_cli import export

sys.path.insert(0, str(Path(__file__).parent))
from common import CACHE, qwen3_06b
from same_file import interleaved, table

TYPES = ["Q4_K_M", "Q5_K_M", "Q6_K"]


def gguf_files(llama_bin: Path, tokenizer: str, types: list[str] = TYPES) -> dict[str, Path]:
    src = qwen3_06b("bfloat16", tokenizer=tokenizer)
    bf16 = CACHE / "qwen3-0.6b-bf16.gguf"
    if not bf16.exists():
        export(str(src), bf16, "bf16")
    files = {}
    for kind in types:
        f = CACHE / f"qwen3-0.6b-{kind.lower()}.gguf"
        if not f.exists():
            part = f.with_suffix(".part")
            subprocess.run([str(llama_bin / "llama-quantize"), str(bf16), str(part), kind], check=True,
                           capture_output=True)  # fmt: skip
            part.rename(f)
        files[kind] = f
    return files


def weight_bytes(f: Path) -> tuple[int, int]:
    """(bytes fs's tiles read per decode step: codes, and a K-quant's super-block records or else its float32
    scales and biases; bytes the file's tensors take)."""
    from gguf import GGUFReader

    from fs_model.cpu import tiles
    from fs_weights import Checkpoint

    ours = 0
    with Checkpoint.open(f) as ck:
        for n in ck.names():
            if n.endswith((".scales", ".biases")):
                continue
            records = ck.superblocks(n) if ck.is_quantized(n) else None
            base = n.removesuffix(".weight")
            side = [ck.info(base + p).nbytes for p in (".scales", ".biases")] if ck.is_quantized(n) else []
            codes = ck.info(n).nbytes
            bits = ck.code_bits(n)  # GGUF's 5- and 6-bit codes, kept packed (fs_model.cpu.packed_codes.keep_packed)
            G = ck.quant_params(n)[1] if bits is not None else 0
            if bits is not None and tiles.applies(f"q{bits}i", ck.info(base + ".scales").shape[-1] * G, G):
                codes = codes * bits // 8
            ours += codes + (records[1].nbytes if records is not None else sum(side))
    return ours, sum(int(t.n_bytes) for t in GGUFReader(str(f)).tensors)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", required=True, type=Path, help="llama.cpp's bin directory (benchmarks/llama_cpp.py)")
    ap.add_argument("--prefill", type=int, default=64)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3, help="every engine this many times, interleaved; the best kept")
    ap.add_argument("--tokenizer", default=str(Path(__file__).resolve().parents[2] / "shared" / "qwen3-tokenizer"))
    args = ap.parse_args()
    S, N = args.prefill, args.decode
    files = gguf_files(args.llama_bin, args.tokenizer)
    # the same tiles reading float32 scales and biases per group instead of the K-quants' super-block records
    expanded = "fs FS_SUPERBLOCK_SCALES=0"
    best = interleaved(files, args.llama_bin, S, N, args.rounds, {expanded: {"FS_SUPERBLOCK_SCALES": "0"}})
    print(f"\nQwen3-0.6B shapes, prefill {S}, decode {N}, 2 threads, best of {args.rounds} interleaved rounds")

    def sizes(kind: str, a: dict, b: dict) -> str:
        ours, theirs = weight_bytes(files[kind])
        return f"{ours / 1e6:.0f} / {theirs / 1e6:.0f}"

    table(files, best, "file", "MB read per step fs/file", sizes)
    print(f"\nfs reading super-block records ÷ {expanded} (the same bits):")
    for kind in files:
        a, b = best.get(f"fs {kind}"), best.get(f"{expanded} {kind}")
        if a and b:
            pre, dec = a["prefill_tps"] / b["prefill_tps"], a["decode_tps"] / b["decode_tps"]
            print(f"  {kind}: prefill {pre:.2f}×, decode {dec:.2f}×")


if __name__ == "__main__":
    main()
