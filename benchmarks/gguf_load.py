"""Opening a Qwen3 GGUF file: fs's whole load (header, Qwen3's 151,936-entry vocabulary and merges rebuilt as a
tokenizer, every tensor mapped) against the `gguf` package's `GGUFReader` merely parsing the same file, measured
in the same run, best of N interleaved rounds, each in a fresh process.

    uv run --group bench --package fs-generate python benchmarks/gguf_load.py [--rounds 3] [--tokenizer DIR]

The file: the tiny random Qwen3 written with the real Qwen3 tokenizer and exported as Q8_0 by fs-convert-gguf
(the vocabulary, not the tensors, is what a GGUF's metadata costs: it is the same for every Qwen3 size).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

from fs_weights import preset, write_random_checkpoint

FS = """
import json, sys, time
import fs_model.cpu  # the kernels' import (numba) is the same for any model file: not the file's cost
t0 = time.perf_counter()
from fs_generate import load
model, tok = load(sys.argv[1], dtype="float32")
print(json.dumps({"seconds": time.perf_counter() - t0, "vocab": tok.vocab_size}))
"""

PEER = """
import json, sys, time
t0 = time.perf_counter()
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
n = sum(1 for _ in r.fields) + len(r.tensors)
print(json.dumps({"seconds": time.perf_counter() - t0, "items": n}))
"""


def timed(script: str, path: Path) -> float:
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.splitlines()[-1])["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokenizer", default=str(Path(__file__).resolve().parents[2] / "shared" / "qwen3-tokenizer"))
    ap.add_argument("--dir", type=Path, default=Path("/tmp/fs-bench/gguf-load"))
    args = ap.parse_args()
    src, gguf = args.dir / "tiny-qwen3-vocab", args.dir / "tiny-qwen3-vocab-q8_0.gguf"
    if not (src / "config.json").exists():
        write_random_checkpoint(src, preset("tiny"), dtype="bfloat16", tokenizer=args.tokenizer)
    if not gguf.exists():
        from fs_generate.gguf_cli import export

        export(str(src), gguf, "q8_0")
    fs, peer = [], []
    for _ in range(args.rounds):  # interleaved: a noisy moment hits both
        fs.append(timed(FS, gguf))
        peer.append(timed(PEER, gguf))
    f, p = min(fs), min(peer)
    print(f"file: {gguf.name}, {gguf.stat().st_size / 1e6:.1f} MB")
    print(f"fs load (header + tokenizer + tensors): {f:.2f} s   gguf.GGUFReader (parse only): {p:.2f} s   "
          f"ratio fs/peer {f / p:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
